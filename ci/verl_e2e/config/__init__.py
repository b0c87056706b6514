"""Config: what a site decides, read once and checked whole (the floor every stage above stands on).

matrix.yaml (`matrix`: levels, variants, families, rules, defaults, the compatibility record) is
validated against its JSON schema (`schema_check`) and then across fields (`cross_checks`), so a bad
matrix is one list of problems, not a failure halfway through a run. Its path rules compile to glob
sets (`globs`) and aspect patterns (`aspects`); the failure signatures a log is matched against
(`signatures`) and the verl/Megatron-LM compatibility record (`compat`) live here because both are
site data. `site` holds the installer's settings for the caller workflows. Nothing here imports a
stage above it.
"""

from verl_e2e.config.matrix import Matrix, default_matrix_path, load_matrix
from verl_e2e.config.signatures import Signature, default_signatures

__all__ = ["Matrix", "Signature", "default_matrix_path", "default_signatures", "load_matrix"]
