"""Test double for verl's examples/data_preprocess/gsm8k.py: writes train/test parquet files.

The files carry the parquet magic bytes only (the trainer double never reads them); FAKE_VERL_DATA=fail
makes it fail like a preprocessing run without network access.
"""

import argparse
import os
import sys
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--local_save_dir", required=True)
ap.add_argument("--local_dataset_path")
args = ap.parse_args()
if os.environ.get("FAKE_VERL_DATA") == "fail":
    sys.stderr.write("ConnectionError: Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\n")
    sys.exit(1)
out = Path(args.local_save_dir)
out.mkdir(parents=True, exist_ok=True)
for name in ("train", "test"):
    (out / f"{name}.parquet").write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
print(f"saved GSM8K to {out}")
