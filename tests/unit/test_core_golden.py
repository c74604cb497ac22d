"""Every output and changelog record of a seeded random workload, byte for byte, as on main.

The golden digests were produced by ``tests/unit/core_golden.py --write`` from the code before
the Assembler's fast paths (issue 11); any change of behaviour shows as the first step whose
outputs or changelog records differ.
"""

from __future__ import annotations

import json

import pytest

from tests.unit import core_golden


@pytest.mark.parametrize("seed", core_golden.SEEDS)
def test_outputs_and_changelog_unchanged(seed: int) -> None:
    expected = json.loads(core_golden.GOLDEN.read_text())[str(seed)]
    got = core_golden.run(seed, core_golden.RESPONSES)
    assert len(got) == len(expected)
    first = next((i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b), None)
    assert first is None, f"seed {seed}: step {first} differs"
