"""What a search varies: the paper's grid, a grid of one's own, or ranges to sample from.

A dimension names one flag of the runner and either lists its values (`learning_rate=5e-5,3e-5`:
a grid, every combination run in the order given) or gives a range to sample
(`learning_rate=loguniform(1e-5,1e-4)`, `uniform(0,0.2)`, `int(2,4)`; `choice(16,32)` is a list
to sample from). Values travel to the runner as the flag texts written here, so a trial's command
line reads as the user wrote it. The seed is not a dimension: every configuration runs with the
seeds the search gives it (`--seeds`, `--restarts`).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import re

from bert_tf2.process.errors import SettingsError

# The paper (Devlin et al. 2019, appendix A.3): learning rate, batch size and epochs, chosen on dev.
PAPER_GRID = (("learning_rate", ("5e-5", "4e-5", "3e-5", "2e-5")),
              ("train_batch_size", ("16", "32")),
              ("num_train_epochs", ("2", "3", "4")))
PRESETS = {"paper": PAPER_GRID}
# Flags the search sets itself, and where the user says what they would have said there.
RESERVED = {"output_dir": "the search gives each trial its own folder under --search_dir",
            "random_seed": "the search sets each trial's seed: use --seeds and --restarts",
            "do_train": "every trial trains", "do_eval": "every trial evaluates on dev",
            "do_predict": "use run_search's --do_predict (it predicts with the chosen trial)",
            "export_dir": "use run_search's --export_dir (it exports the chosen trial)",
            "export_keras_hub": "export the chosen trial's best/ with its runner afterwards "
                                "(--export_keras_hub, --do_train left out)"}
# Short names in trial folder names.
SHORT = {"learning_rate": "lr", "train_batch_size": "bs", "num_train_epochs": "ep",
         "warmup_proportion": "wp", "max_seq_length": "len", "num_warmup_steps": "warm"}
RANGES = ("uniform", "loguniform", "int", "choice")


class SearchSpaceError(SettingsError):
    """A dimension that cannot be searched (bad syntax, bad range, a reserved flag)."""


@dataclasses.dataclass(frozen=True)
class Dimension:
    name: str  # the runner's flag, without --
    kind: str  # "values" (a grid's list), "choice", "uniform", "loguniform" or "int"
    values: tuple = ()  # texts, for "values" and "choice"
    low: float | None = None
    high: float | None = None
    spec: str = ""  # as written, for messages

    def distribution(self):
        """The Optuna distribution a sampler draws this dimension from."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.kind in ("values", "choice"):
            return CategoricalDistribution(self.values)
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high))
        return FloatDistribution(self.low, self.high, log=self.kind == "loguniform")

    def texts_to_check(self) -> list[str]:
        """Values whose flag texts the runner must accept (a range's two ends)."""
        if self.kind in ("values", "choice"):
            return list(self.values)
        return [flag_text(self.low if self.kind != "int" else int(self.low)),
                flag_text(self.high if self.kind != "int" else int(self.high))]


def flag_text(value) -> str:
    """A sampled value as a flag's text (values given as texts stay as written)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def parse_dimension(spec: str, flag: str) -> Dimension:
    """`name=v1,v2,...` or `name=KIND(a,b)`; a SearchSpaceError naming `flag` and the spec."""
    name, sep, rest = spec.partition("=")
    name = name.strip().lstrip("-")
    rest = rest.strip()
    where = f"{flag} {spec!r}"
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not rest:
        raise SearchSpaceError(f"{where}: write NAME=VALUE,VALUE,... or NAME=KIND(LOW,HIGH) with "
                               f"KIND one of {', '.join(RANGES)}")
    if name in RESERVED:
        raise SearchSpaceError(f"{where}: --{name} is not searched: {RESERVED[name]}")
    match = re.fullmatch(r"([a-z]+)\((.*)\)", rest)
    if match is None:
        values = tuple(v.strip() for v in rest.split(","))
        if any(not v for v in values):
            raise SearchSpaceError(f"{where}: an empty value")
        if len(set(values)) != len(values):
            raise SearchSpaceError(f"{where}: a value is listed twice")
        return Dimension(name, "values", values, spec=spec)
    kind, arguments = match.group(1), [a.strip() for a in match.group(2).split(",")]
    if kind not in RANGES:
        raise SearchSpaceError(f"{where}: {kind}(...) is not a range; use one of "
                               f"{', '.join(RANGES)}")
    if kind == "choice":
        if len(arguments) < 2 or any(not a for a in arguments):
            raise SearchSpaceError(f"{where}: choice(...) needs two or more values")
        return Dimension(name, "choice", tuple(arguments), spec=spec)
    if len(arguments) != 2:
        raise SearchSpaceError(f"{where}: {kind}(LOW,HIGH) takes two numbers")
    try:
        low, high = (int(a) for a in arguments) if kind == "int" else (float(a) for a in arguments)
    except ValueError:
        raise SearchSpaceError(f"{where}: {kind}(LOW,HIGH) takes two "
                               f"{'integers' if kind == 'int' else 'numbers'}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise SearchSpaceError(f"{where}: needs LOW < HIGH")
    if kind == "loguniform" and low <= 0:
        raise SearchSpaceError(f"{where}: loguniform needs LOW > 0")
    return Dimension(name, kind, low=low, high=high, spec=spec)


@dataclasses.dataclass
class SearchSpace:
    """The dimensions of a search, in order; a grid when every one lists its values."""

    dimensions: list

    @classmethod
    def from_flags(cls, preset: str | None, grid: list | None, space: list | None
                   ) -> "SearchSpace":
        dimensions = []
        if preset:
            if preset not in PRESETS:
                raise SearchSpaceError(f"--preset={preset}: the presets are "
                                       f"{', '.join(PRESETS)}")
            dimensions += [Dimension(name, "values", values, spec=f"{name}={','.join(values)}")
                           for name, values in PRESETS[preset]]
        dimensions += [parse_dimension(spec, "--grid") for spec in grid or []]
        for spec in space or []:
            dimension = parse_dimension(spec, "--space")
            if dimension.kind == "values":  # a plain list in --space is a choice to sample
                dimension = dataclasses.replace(dimension, kind="choice")
            dimensions.append(dimension)
        names = [d.name for d in dimensions]
        for name in names:
            if names.count(name) > 1:
                raise SearchSpaceError(f"--{name} is searched twice (by --preset, --grid or "
                                       f"--space); give it once")
        return cls(dimensions)

    @property
    def is_grid(self) -> bool:
        return all(d.kind == "values" for d in self.dimensions)

    def names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def grid(self) -> list[dict]:
        """Every combination of a grid's values, the first dimension varying slowest."""
        return [dict(zip(self.names(), values))
                for values in itertools.product(*(d.values for d in self.dimensions))]

    def distributions(self) -> dict:
        return {d.name: d.distribution() for d in self.dimensions}

    def texts_to_check(self) -> list[dict]:
        """Settings whose command lines the runner must accept before any trial runs: the
        whole grid, or each sampled dimension's ends beside the others' first values."""
        if self.is_grid:
            return self.grid()
        first = {d.name: d.texts_to_check()[0] for d in self.dimensions}
        return [dict(first, **{d.name: text}) for d in self.dimensions
                for text in d.texts_to_check()] or [{}]


def config_name(settings: dict) -> str:
    """A configuration's folder-name part: `lr5e-5_bs16_ep2` (flags' short names)."""
    parts = [f"{SHORT.get(name, name)}{value}" for name, value in settings.items()]
    return re.sub(r"[^A-Za-z0-9.+=_-]", "-", "_".join(parts)) or "default"


def flags_of(settings: dict) -> list[str]:
    """The runner's flags for these settings: `--name=text`."""
    return [f"--{name}={flag_text(value)}" for name, value in settings.items()]
