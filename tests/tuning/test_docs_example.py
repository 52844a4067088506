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
