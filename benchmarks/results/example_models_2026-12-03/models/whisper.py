"""Whisper as the executorch wheel's example whisper builds it (transformers' WhisperModel, openai/whisper-base,
the encoder's last hidden state for one decoder token), random weights, at 3 s of audio instead of 30 s.

The example calls WhisperModel.from_pretrained("openai/whisper-base"), a download; whisper-base's published shape
(its config.json: width 512, 6 encoder and 6 decoder layers, 8 heads, FFN 2048) builds without it. transformers
checks that the mel input has 2 x max_source_positions frames, so 300 frames need max_source_positions=150.
Needs transformers (which keeps the CPU torch), and no torchaudio beside it.
"""

import torch
from transformers import WhisperConfig, WhisperModel

FRAMES = 300  # 3 s of 10 ms mel frames; the example's 3000 is 30 s


def _config() -> WhisperConfig:
    return WhisperConfig(
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        max_source_positions=FRAMES // 2,
        decoder_start_token_id=50258,
    )


class WhisperWrapper(torch.nn.Module):  # the example's wrapper
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(
            input_features=input_features, decoder_input_ids=decoder_input_ids, use_cache=False
        ).last_hidden_state


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return WhisperWrapper(WhisperModel(_config())).eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    features = torch.randn(1, 80, FRAMES, generator=torch.Generator().manual_seed(1))
    return (features, torch.tensor([[_config().decoder_start_token_id]], dtype=torch.long))
