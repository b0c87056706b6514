"""Built-in example changes, so `verl-e2e plan --example` shows a real plan on a fresh machine."""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, str]] = {
    "new-provider": (
        "a new OLMoE provider and bridge (an MoE family), with its test and docs",
        "A\tsrc/megatron/bridge/models/olmoe/olmoe_provider.py\n"
        "M\tsrc/megatron/bridge/models/olmoe/olmoe_bridge.py\n"
        "M\tsrc/megatron/bridge/models/__init__.py\n"
        "A\ttests/unit_tests/models/olmoe/test_olmoe_provider.py\n"
        "A\tdocs/models/llm/olmoe.md\n",
    ),
    "peft": (
        "a LoRA layer change",
        "M\tsrc/megatron/bridge/peft/lora_layers.py\nM\ttests/unit_tests/peft/test_lora_layers.py\n",
    ),
    "hf-export": (
        "an HF export fix in the model bridge",
        "M\tsrc/megatron/bridge/models/conversion/model_bridge.py\n",
    ),
    "megatron-lm-bump": (
        "a Megatron-LM submodule bump",
        "M\t3rdparty/Megatron-LM\nM\tuv.lock\n",
    ),
    "docs-only": (
        "documentation only",
        "M\tdocs/index.md\nM\tREADME.md\n",
    ),
}
