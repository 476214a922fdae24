"""Where training metrics go: ``logger=csv`` (metrics.csv), ``tensorboard`` or ``wandb``
(offline unless ``logger.options.mode=online``). Every run writes metrics.csv; the other two
log there as well. Each has ``log(metrics, step)``, ``finish(results)`` and ``close()``;
``start_step`` > 0 means a resumed run, whose earlier rows are kept and whose rows after
``start_step`` (logged by the killed run after its last checkpoint) are dropped.

``finish`` hands over what the run ended with (``RunResults``): its summary's numbers and the
reference lines (the heuristics', the searches' and the lower bound, in seconds), its figures
and its files. TensorBoard gets the figures as images, the numbers as hparams metrics and the
summary as text; wandb gets the figures as images, the numbers in the run's summary, and the
checkpoint and best placements as a ``model`` artifact."""

from __future__ import annotations

import csv
import json
import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlplace.errors import ConfigError
from rlplace.extras import missing_extra
from rlplace.options import checked


@dataclass
class RunResults:
    """What a finished run hands its logger: ``numbers`` (name -> a finite number: the summary's
    and the references'), ``summary`` (results.json), ``figures`` (PNG files) and ``files`` (the
    checkpoint, placements)."""

    numbers: dict[str, float]
    summary: dict[str, Any]
    figures: list[Path] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)   # by their path in the run directory


class Logger(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self, results: RunResults) -> None: ...

    def close(self) -> None: ...


def finite_numbers(values: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of ``values`` (nested dicts flattened to ``a/b`` names)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out |= finite_numbers(value, f"{prefix}{key}/")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[f"{prefix}{key}"] = float(value)
    return out


class CsvLogger:
    def __init__(self, out_dir: Path, start_step: int = 0, filename: str = "metrics.csv"):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(out_dir) / filename
        rows = []
        if start_step > 0 and self.path.is_file():
            with self.path.open() as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= start_step]
        self.fields: list[str] | None = list(rows[0]) if rows else None
        self._file = self.path.open("w", newline="")
        self._writer = None
        if rows:
            self._writer = csv.DictWriter(self._file, self.fields)
            self._writer.writeheader()
            self._writer.writerows(rows)

    def log(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": step, **metrics}
        if self._writer is None:
            self.fields = list(row)
            self._writer = csv.DictWriter(self._file, self.fields)
            self._writer.writeheader()
        self._writer.writerow({k: row.get(k, "") for k in self.fields})
        self._file.flush()

    def finish(self, results: RunResults) -> None:
        """Nothing: results.json and the figures are in the run directory already."""

    def close(self) -> None:
        self._file.close()


class TensorBoardLogger:
    def __init__(self, out_dir: Path, start_step: int = 0, subdir: str = "tensorboard"):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ModuleNotFoundError as exc:
            raise missing_extra(exc, "logger=tensorboard") or exc from None
        self.writer = SummaryWriter(str(Path(out_dir) / subdir), purge_step=start_step or None)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def finish(self, results: RunResults) -> None:
        import matplotlib.image

        for figure in results.figures:
            self.writer.add_image(f"figures/{figure.stem}", matplotlib.image.imread(figure)[..., :3], dataformats="HWC")
        self.writer.add_text("summary", f"```\n{json.dumps(results.summary, indent=1, default=str)}\n```")
        self.writer.add_hparams({"run": self.writer.log_dir}, {f"final/{k}": v for k, v in results.numbers.items()},
                                run_name=".")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, out_dir: Path, start_step: int = 0, project: str = "rlplace", mode: str = "offline",
                 config: dict[str, Any] | None = None, name: str | None = None):
        import wandb

        if mode not in ("offline", "online", "disabled"):
            raise ConfigError(f"logger.options.mode must be offline, online or disabled, got {mode!r}")
        run_id_file = Path(out_dir) / "wandb_run_id"
        run_id = run_id_file.read_text().strip() if start_step > 0 and run_id_file.is_file() else uuid.uuid4().hex[:8]
        run_id_file.write_text(run_id)
        self.run = wandb.init(project=project, mode=mode, dir=str(out_dir), config=config, name=name,
                              id=run_id, resume="allow")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self, results: RunResults) -> None:
        import wandb

        if results.figures:
            self.run.log({f"figures/{f.stem}": wandb.Image(str(f)) for f in results.figures})
        self.run.summary.update(results.numbers)
        if results.files:
            artifact = wandb.Artifact(f"run-{self.run.id}", type="model")
            for name, path in results.files.items():
                artifact.add_file(str(path), name=name)
            self.run.log_artifact(artifact)

    def close(self) -> None:
        self.run.finish()


class Tee:
    """Every metric to each of ``loggers``."""

    def __init__(self, *loggers: Logger):
        self.loggers = loggers

    def log(self, metrics: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.log(metrics, step)

    def finish(self, results: RunResults) -> None:
        for logger in self.loggers:
            logger.finish(results)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


LOGGERS = {"csv": CsvLogger, "tensorboard": TensorBoardLogger, "wandb": WandbLogger}
LOGGER_ARGUMENTS = ("out_dir", "start_step")  # given by the trainer; the others are logger.options


def check_logger(name: str, /, **options) -> None:
    """A ConfigError for an unknown logger or options it does not take, before anything is
    opened (a run checks its logger at the start and opens it once its checkpoint is read)."""
    if name not in LOGGERS:
        raise ConfigError(f"unknown logger {name!r} (known: {', '.join(sorted(LOGGERS))})")
    checked(LOGGERS[name], options, f"logger {name!r}", skip=LOGGER_ARGUMENTS)


def make_logger(name: str, out_dir: Path, start_step: int = 0, /, **options) -> Logger:
    """The logger ``name``; besides csv, it and metrics.csv."""
    check_logger(name, **options)
    chosen = LOGGERS[name](Path(out_dir), start_step, **options)
    return chosen if name == "csv" else Tee(CsvLogger(Path(out_dir), start_step), chosen)
