"""docs/tuning.md's example is a valid scenario and proposes the trials the page describes."""

import re
from pathlib import Path

import yaml

from fedbench.scenario import parse_scenario
from fedbench.sweeps.tuning import plan

DOC = Path(__file__).parents[2] / "docs/tuning.md"


def test_the_documented_example_validates_and_expands():
    raw = yaml.safe_load(re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1))
    tuning = plan(parse_scenario(raw, str(DOC)))
    fedavg, fedprox, fedavgm = tuning.entries
    assert len(fedavg.trials) == 6 and len(fedprox.trials) == 18 and fedavgm.tune is None
    assert all(t.spec.validation.fraction == 0.1 and t.spec.rounds == 30 and t.seeds == (0,) for t in fedavg.trials)
    assert {t.spec.algorithm["mu"] for t in fedprox.trials} == {0.01, 0.1, 1.0}
    assert {t.values["server.lr"] for t in fedprox.trials} == {1.0, 3.0}


def test_the_documented_halving_example_has_the_rungs_it_states():
    """The halving block of docs/tuning.md, on a scenario of 18 rounds: the rungs and the validate line it shows."""
    from fedbench.sweeps.tuning import plan_lines
    from tests.factories import tiny_scenario

    text = DOC.read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "scheduler: halving" in b)
    tuning = plan(parse_scenario(tiny_scenario(tune=yaml.safe_load(block)["tune"], rounds=18)))
    assert tuning.entries[0].rungs == ((2, 18), (6, 6), (18, 2))
    shown = re.search(r"```\n  (FedAvg: successive halving.*?), …\n```", text, re.S).group(1)
    assert plan_lines(tuning)[1].startswith("  " + " ".join(shown.split()))
