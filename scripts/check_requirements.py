"""Exit 0 when every ``name==version`` pin of a requirements file is installed, else 1."""

from __future__ import annotations

import sys
from importlib import metadata


def main(path: str) -> int:
    missing = []
    for line in open(path, encoding="utf-8"):
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        name, _, version = spec.partition("==")
        try:
            if version and metadata.version(name) != version:
                missing.append(spec)
        except metadata.PackageNotFoundError:
            missing.append(spec)
    if missing:
        print("missing or different:", ", ".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
