"""MobileBERT as the executorch wheel's example builds it (examples/models/mobilebert), random weights.

The example calls MobileBertModel.from_pretrained("google/mobilebert-uncased") and its tokenizer, both downloads;
the same architecture from its default config (MobileBertConfig() is mobilebert-uncased's shape) needs none.
Needs transformers (which keeps the CPU torch), and no torchaudio beside it.
"""

import torch
from transformers import MobileBertConfig, MobileBertModel


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        config = MobileBertConfig()
        config.return_dict = False  # as the example's from_pretrained(..., return_dict=False)
        return MobileBertModel(config).eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    # the example's tokenizer gives 8 ids for "Hello, my dog is cute"
    return (torch.randint(0, MobileBertConfig().vocab_size, (1, 8), generator=torch.Generator().manual_seed(1)),)
