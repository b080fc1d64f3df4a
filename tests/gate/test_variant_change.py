"""A record missing because the test's settings changed says which settings, not just "no baseline"."""

from __future__ import annotations

from pytest_sme2.gate.variant_change import missing_records_text, variant_change

STORED = [
    "tiny_llama fp32-xnnpack [emulated sme2=on threads=1 prefill P=16]",
    "tiny_llama fp32-xnnpack [emulated sme2=on threads=1 decode D=8 after P=16]",
    "tiny_llama fp32-xnnpack [emulated sme2=off threads=1 prefill P=16]",
    "tiny_llama fp32-xnnpack [emulated sme2=off threads=1 decode D=8 after P=16]",
]


def test_a_longer_prompt_is_named_as_the_change() -> None:
    assert variant_change("tiny_llama fp32-xnnpack [emulated sme2=on threads=1 prefill P=12]", STORED) == "P=16 -> P=12"


def test_decode_steps_and_prompt_changed_together_are_both_named() -> None:
    now = "tiny_llama fp32-xnnpack [emulated sme2=off threads=1 decode D=4 after P=12]"
    assert variant_change(now, STORED) == "D=8 -> D=4, P=16 -> P=12"


def test_another_model_or_recipe_is_no_change_of_settings() -> None:
    assert variant_change("tiny_llama int8-xnnpack [emulated sme2=on threads=1 prefill P=12]", STORED) is None
    assert variant_change("mlp fp32-xnnpack [emulated sme2=on threads=1 prefill P=12]", STORED) is None


def test_a_new_word_in_the_variant_is_not_a_change_of_value() -> None:
    assert variant_change("tiny_llama fp32-xnnpack [emulated sme2=on threads=1 prefill P=16 chunk=4]", STORED) is None


def test_two_equally_near_records_name_none() -> None:
    stored = ["m fp32 [host threads=2 P=8]", "m fp32 [host threads=4 P=8]"]
    assert variant_change("m fp32 [host threads=1 P=8]", stored) is None


def test_the_missing_text_keeps_labels_without_a_near_record_as_they_are() -> None:
    text = missing_records_text(
        ["new fp32 [host threads=1]", "tiny_llama fp32-xnnpack [emulated sme2=on threads=1 prefill P=32]"], STORED
    )
    assert text.startswith("new fp32 [host threads=1], tiny_llama")
    assert "settings changed since the baseline was recorded: P=16 -> P=32" in text
