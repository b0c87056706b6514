#!/usr/bin/env python3
"""Inject a realistic bug into a Megatron-Bridge checkout as one commit, to see which cell catches it.

    python tools/mutate_bridge.py BRIDGE NAME       # commit mutation NAME on a branch off the base
    python tools/mutate_bridge.py BRIDGE --reset    # back to the base commit (branch verl-e2e-base)
    python tools/mutate_bridge.py --list

Each mutation is an exact text replacement in Bridge 067f987's sources (it refuses a tree where the
text is not found exactly once), committed on `mutant/<NAME>` so `verl-e2e plan --repo BRIDGE --base
verl-e2e-base --head HEAD` sees a real diff. The commit's diff is printed. Used for the mutation runs
kept in tests/fixtures/real-runs (see its README); nothing here is shipped to a site.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BASE = "verl-e2e-base"
# name -> (file, old text, new text, what it models, the cell expected to catch it)
MUTATIONS = {
    "lora-keyword": (
        "src/megatron/bridge/peft/lora.py",
        "                dropout_position=self.dropout_position,\n",
        "                dropout_pos=self.dropout_position,\n",
        "a keyword renamed in LoRA wrapping (the adapter no longer accepts it)",
        "L0-lora-ddp-qwen",
    ),
    "save-filter": (
        "src/megatron/bridge/training/checkpointing.py",
        "                for parameter_name, parameter_value in checkpoint_section_value.items()\n"
        "                if peft_config.adapter_key_filter(parameter_name)",
        "                for parameter_name, parameter_value in checkpoint_section_value.item()\n"
        "                if peft_config.adapter_key_filter(parameter_name)",
        "the PEFT adapter filter applied at save breaks (a typo in the state-dict walk)",
        "L1-save-resume-qwen",
    ),
    "provider-field": (
        "src/megatron/bridge/models/qwen/qwen2_bridge.py",
        "        provider.add_qkv_bias = True\n",
        "        provider.add_qkv_bias = hf_pretrained.config.qkv_bias\n",
        "a provider field read from a config key the HF config does not have",
        "L0-lora-ddp-qwen",
    ),
    "nan-scaling": (
        "src/megatron/bridge/peft/utils.py",
        "        x = x * (self.alpha / self.dim)\n",
        "        x = x / x.abs().amax(dim=-1, keepdim=True) * (self.alpha / self.dim)\n",
        "the adapter output normalised without an epsilon (zero-initialised LoRA B makes it 0/0, NaN)",
        "L0-lora-ddp-qwen",
    ),
    "dispatcher-type": (
        "src/megatron/bridge/models/qwen/qwen3_moe_bridge.py",
        '        provider.moe_token_dispatcher_type = "alltoall"\n',
        '        provider.moe_token_dispatcher_type = "all_to_all"\n',
        "a provider value Megatron-Core does not accept (the MoE token dispatcher's name)",
        "L0-lora-ddp-qwen3_moe",
    ),
    "export-name": (
        "src/megatron/bridge/models/qwen/qwen2_bridge.py",
        '            "decoder.layers.*.mlp.linear_fc2.weight": "model.layers.*.mlp.down_proj.weight",\n',
        '            "decoder.layers.*.mlp.linear_fc2.weight": "model.layers.*.mlp.down_proj.weights",\n',
        "an HF parameter name mistyped in the mapping (import skips it, export sends a name the rollout lacks)",
        "L0-lora-ddp-qwen",
    ),
    "adapter-scale-floor": (
        "src/megatron/bridge/peft/utils.py",
        "        x = x * (self.alpha / self.dim)\n",
        "        x = x * (self.alpha // (2 * self.dim))\n",
        "the LoRA scale computed with floor division (alpha=rank gives 0: the adapter output is zeroed, "
        "training runs and learns nothing)",
        "L0-lora-ddp-llama",
    ),
    "adapter-detached": (
        "src/megatron/bridge/peft/lora_layers.py",
        "        combined = linear_output + adapter_output\n",
        "        combined = linear_output + adapter_output.detach()\n",
        "the adapter output added without its graph (no gradient reaches the adapters)",
        "L5-learning-signal-llama",
    ),
    "export-swap": (
        "src/megatron/bridge/models/conversion/param_mapping.py",
        '        return {self.hf_param["gate"]: gate, self.hf_param["up"]: up}\n',
        '        return {self.hf_param["gate"]: up, self.hf_param["up"]: gate}\n',
        "the Megatron->HF export of a gated MLP swaps gate and up (no exception: the rollout engine gets "
        "weights the trainer does not have)",
        "L0-lora-ddp-llama",
    ),
    "import-error": (
        "src/megatron/bridge/peft/utils.py",
        "from megatron.bridge.utils.activation_map import str_to_dtype\n",
        "from megatron.bridge.utils.activation_map import str_to_torch_dtype\n",
        "a module verl imports names a symbol that does not exist (an import-time error)",
        "L0-lora-ddp-llama",
    ),
    "vision-embeds-dropped": (
        "src/megatron/bridge/models/qwen_vl/modeling_qwen25_vl.py",
        "                inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds)\n",
        "                inputs_embeds.masked_scatter(image_mask, image_embeds)\n",
        "Qwen2.5-VL's image features computed and then dropped (masked_scatter is out of place): the trainer "
        "sees placeholder embeddings where the rollout sees the picture",
        "L4-vlm-qwen25_vl",
    ),
    "deepstack-dropped": (
        "src/megatron/bridge/models/qwen_vl/modelling_qwen3_vl/transformer_block.py",
        "        local_this = hidden_states[visual_pos_masks, :].clone() + visual_embeds\n",
        "        local_this = hidden_states[visual_pos_masks, :].clone()\n",
        "Qwen3-VL's deepstack features no longer added to the early decoder layers (the main image "
        "embeddings still are)",
        "L4-vlm-qwen_vl",
    ),
    "adapter-filter-inverted": (
        "src/megatron/bridge/training/checkpointing.py",
        '                if peft_config.adapter_key_filter(parameter_name) and "_extra_state" not in parameter_name\n',
        "                if not peft_config.adapter_key_filter(parameter_name)"
        ' and "_extra_state" not in parameter_name\n',
        "the PEFT checkpoint filter inverted: a save keeps the frozen base weights instead of the adapters, and a "
        "resume (filtered the same way) loads them back and trains fresh adapters with every counter right",
        "L1-save-resume-qwen",
    ),
}


def git(bridge: Path, *args: str) -> str:
    cmd = ["git", "-C", str(bridge), "-c", "user.name=verl-e2e", "-c", "user.email=verl-e2e@localhost", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def reset(bridge: Path) -> None:
    if not git(bridge, "branch", "--list", BASE).strip():
        git(bridge, "branch", BASE)  # the first call marks the unmodified commit
    git(bridge, "checkout", "-q", "-f", "--detach", BASE)  # detached: a worktree of the same repo may hold BASE


def mutate(bridge: Path, name: str) -> str:
    path, old, new, what, _ = MUTATIONS[name]
    reset(bridge)
    source = bridge / path
    text = source.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"mutate_bridge: {path}: the text to replace is found {text.count(old)} times, not once")
    git(bridge, "checkout", "-q", "-B", f"mutant/{name}")
    source.write_text(text.replace(old, new))
    git(bridge, "commit", "-qam", f"mutation {name}: {what}")
    return git(bridge, "show", "--format=%H %s", "HEAD")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bridge", type=Path, nargs="?")
    ap.add_argument("name", nargs="?", choices=sorted(MUTATIONS))
    ap.add_argument("--reset", action="store_true")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for name, (path, _, _, what, cell) in MUTATIONS.items():
            print(f"{name:<16} {cell:<22} {path}: {what}")
        return 0
    if args.bridge is None or (args.name is None and not args.reset):
        ap.error("pass BRIDGE and a mutation NAME (or --reset, or --list)")
    if args.reset:
        reset(args.bridge)
        return 0
    sys.stdout.write(mutate(args.bridge, args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
