"""An MLflow tracking store from the store: a run found by its ``fedbench.run_id`` tag gets only the rounds it lacks."""

from __future__ import annotations

import re
import time
from typing import Any

from fedbench.trackers.rows import RunExport

MLFLOW_STATUS = {"finished": "FINISHED", "diverged": "FAILED", "failed": "FAILED", "running": "KILLED"}
MLFLOW_BATCH = 1000  # metrics per log_batch call (MLflow's limit)
MLFLOW_PARAMS = 100  # params per log_batch call (MLflow's limit)


def mlflow_key(name: str) -> str:
    """A metric or param name as MLflow accepts it (letters, digits, ``_-. :/``; others → ``_``)."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name)


class MlflowWriter:
    """An MLflow tracking store: experiment = scenario name, one run per fedbench run (tag ``fedbench.run_id``)."""

    def __init__(self, uri: str) -> None:
        import logging

        from mlflow.tracking import MlflowClient

        for name in ("alembic", "mlflow"):  # the SQLite store's first use prints its migrations otherwise
            logging.getLogger(name).setLevel(logging.WARNING)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self._experiments: dict[str, str] = {}

    def experiment(self, name: str) -> str:
        """The id of the experiment named ``name``, created if missing (another process may create it first)."""
        if name not in self._experiments:
            from mlflow.exceptions import MlflowException

            found = self.client.get_experiment_by_name(name)
            if found is None:
                try:
                    self._experiments[name] = self.client.create_experiment(name)
                except MlflowException:
                    found = self.client.get_experiment_by_name(name)
                    if found is None:
                        raise
            if found is not None:
                self._experiments[name] = found.experiment_id
        return self._experiments[name]

    def find(self, run: RunExport) -> Any:
        """The MLflow run of ``run`` (by its ``fedbench.run_id`` tag), or None."""
        found = self.client.search_runs(
            [self.experiment(run.scenario)], filter_string=f"tags.`fedbench.run_id` = '{run.run_id}'", max_results=1
        )
        return found[0] if found else None

    def write(self, run: RunExport) -> bool:
        """Log the rounds MLflow lacks, the params once and the tags; False when it was up to date."""
        from mlflow.entities import Metric, Param as MlflowParam, RunTag

        existing = self.find(run)
        if existing is None:
            mlrun = self.client.create_run(
                self.experiment(run.scenario), run_name=f"{run.algorithm} seed {run.seed}", tags=run.tags()
            )
            run_id, done = mlrun.info.run_id, 0
            params = [MlflowParam(mlflow_key(k), str(v)[:6000]) for k, v in run.params.items()]
            for i in range(0, len(params), MLFLOW_PARAMS):
                self.client.log_batch(run_id, params=params[i : i + MLFLOW_PARAMS])
        else:
            run_id, tags = existing.info.run_id, existing.data.tags
            done = int(tags.get("fedbench.last_round", 0))
            same = {k: tags.get(k) for k in run.tags()} == run.tags()
            if same and done >= run.last_round:
                return False
        now = int(time.time() * 1000)
        metrics = [
            Metric(mlflow_key(k), v, now, round_)
            for round_, values in run.rounds
            if round_ > done
            for k, v in values.items()
        ]
        for i in range(0, len(metrics), MLFLOW_BATCH):
            self.client.log_batch(run_id, metrics=metrics[i : i + MLFLOW_BATCH])
        tags = {**run.tags(), "fedbench.last_round": str(max(done, run.last_round))}
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        status = MLFLOW_STATUS[run.status]
        if status == "KILLED":
            self.client.update_run(run_id, status=status)
        else:
            self.client.set_terminated(run_id, status=status)
        return True
