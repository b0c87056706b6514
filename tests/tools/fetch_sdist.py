#!/usr/bin/env python3
"""Download a package's sdist from PyPI's simple index and check it against the index's sha256.

`pip download --no-binary` would build the sdist to read its metadata (megatron-bridge's needs its
build backend); the tests only read the tree, so the archive is fetched as the index lists it.

    python3 tests/tools/fetch_sdist.py megatron-bridge 0.6.2 .cache/sdist
"""

from __future__ import annotations

import hashlib
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path


def main(name: str, version: str, out: str) -> int:
    index = f"https://pypi.org/simple/{name}/"
    html = urllib.request.urlopen(index, timeout=60).read().decode()
    wanted = f"{name.replace('-', '_')}-{version}.tar.gz"
    links = [h for h in re.findall(r'href="([^"]+)"', html) if wanted in h]
    if not links:
        print(f"fetch_sdist: {wanted} is not on {index}", file=sys.stderr)
        return 1
    url = urllib.parse.urljoin(index, links[0])
    digest = urllib.parse.urlparse(url).fragment.removeprefix("sha256=")
    data = urllib.request.urlopen(url.split("#")[0], timeout=300).read()
    if digest and hashlib.sha256(data).hexdigest() != digest:
        print(f"fetch_sdist: {wanted}: sha256 does not match the index", file=sys.stderr)
        return 1
    target = Path(out) / wanted
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    print(f"fetch_sdist: {target} ({len(data)} bytes, sha256 checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
