"""Reading what a run script's ``--dry-run`` printed."""

import yaml


def printed_section(stdout: str, name: str):
    """The top-level section ``name`` of the config a dry run printed, parsed (the lines from ``name:`` to the
    next unindented line)."""
    lines = stdout.splitlines()
    start = lines.index(f"{name}:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return yaml.safe_load("\n".join(lines[start:end]))[name]
