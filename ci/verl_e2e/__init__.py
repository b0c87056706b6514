"""verl-e2e: run a Megatron-Bridge change inside verl's Megatron PPO loop and judge the evidence."""

__version__ = "0.1.0"
