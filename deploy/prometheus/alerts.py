"""Writes alerts.yml: the rules of alerts.template.yml, each `@name@` line replaced by the terms
every model declares under that name (its `alerts.json`, in its folder
`crates/swdaq-app/src/models/<model>/`, as `swdaq models --json` lists them), joined by `or`.

    python3 deploy/prometheus/alerts.py [SWDAQ]   # rewrite deploy/prometheus/alerts.yml
                                                  # (SWDAQ: the binary; $SWDAQ_BIN, else
                                                  # target/debug/swdaq)

Edit the template or a model's alerts.json, not alerts.yml: tests/python/test_alerts.py checks
that alerts.yml is what this script writes."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent
TEMPLATE = DIRECTORY / "alerts.template.yml"
PLACE = re.compile(r"^( *)@([a-z_]+)@$", re.MULTILINE)
WRITTEN_BY = (
    "# Written by deploy/prometheus/alerts.py from alerts.template.yml and each model's alerts.json:\n"
    "# edit those, not this file.\n"
)


def models(swdaq: str) -> list[dict]:
    listed = subprocess.run([swdaq, "models", "--json"], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(listed.stdout)


def render(template: str, listed: list[dict]) -> str:
    """alerts.yml's text; an error for a name no model fills or a model's name no rule takes."""
    names = {name for _, name in PLACE.findall(template)}
    for m in listed:
        unknown = set(m.get("alerts") or {}) - names
        if unknown:
            raise ValueError(f"model {m['name']}: alerts.json names {sorted(unknown)}, which no rule takes")
    out = [WRITTEN_BY]
    for line in template.splitlines(keepends=True):
        place = PLACE.fullmatch(line.rstrip("\n"))
        if not place:
            out.append(line)
            continue
        indent, name = place.groups()
        terms = [t for m in listed for t in (m.get("alerts") or {}).get(name, [])]
        if not terms:
            raise ValueError(f"@{name}@: no model declares a term")
        out += [indent + part + "\n" for part in "\nor ".join(terms).split("\n")]
    return "".join(out)


if __name__ == "__main__":
    default = os.environ.get("SWDAQ_BIN", str(DIRECTORY.parents[1] / "target" / "debug" / "swdaq"))
    text = render(TEMPLATE.read_text(), models(sys.argv[1] if len(sys.argv) > 1 else default))
    (DIRECTORY / "alerts.yml").write_text(text)
