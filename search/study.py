"""A search's trials, scheduled over one Optuna study that every worker of the search shares.

The plan is fixed by the settings: phase 1 runs each configuration (every point of a grid, or
`num_trials` samples) with `seeds` seeds; phase 2 runs the configuration of phase 1's best trial
with `restarts` new seeds. Each (configuration, seed) is a slot, named by its folder under
`SEARCH_DIR/trials/` (`lr2e-5_bs32_ep3_seed12345`). A worker takes the next slot no trial has
finished, been pruned on or is running, under the scheduling lock (`search.storage`: a local file
lock beside a SQLite study, the server's advisory lock with PostgreSQL), so two workers never take
one slot. A slot whose trial failed (a worker killed, a crash) is taken again: its runner resumes
from the slot folder's checkpoint where that folder is this worker's, so no finished step is run
twice; a worker on another machine runs it from the start in its own folder. A worker whose
process is gone is seen at once on its own machine, and elsewhere when its heartbeat
(`heartbeat_s`) stops. With a database server the workers share nothing else: each keeps the
trials it ran in its own `SEARCH_DIR`, and the chosen trial's weights go to `best/` where it ran.

Every trial reports each evaluation's dev score to the study; the pruner (the median rule) may
stop a configuration's first run (`search.trial_process`). Its further seeds and the restarts
are not pruned: they are the spread. The chosen
trial is the finished trial with the best dev score (the score its `best/` weights have); its
weights are copied to `SEARCH_DIR/best/` and, when asked, predict and export through the runner.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import socket
import time
import warnings

from bert_tf2.engine.best_checkpoint import BEST_DIR
from bert_tf2.engine.results import RESULTS_FILE, lower_is_better, read_eval_results
from bert_tf2.engine.run_config import read_run_config
from bert_tf2.process import interrupts
from bert_tf2.process.atomic_files import recover_directory, staged_directory, write_text
from bert_tf2.process.errors import SettingsError, UserError
from bert_tf2.search import report
from bert_tf2.search.runner_check import flag_value
from bert_tf2.search.space import SearchSpace, config_name, flag_text, flags_of
from bert_tf2.search.storage import (
    LOCK_FILE,
    STUDY_FILE,
    SchedulingLock,
    connection_error,
    is_server,
    normalized,
    redacted,
)
from bert_tf2.search.trial_process import run_trial

logger = logging.getLogger(__name__)

TRIALS_DIR = "trials"
CHOSEN_FILE = "trial.json"
WAIT = "wait"  # a slot is running elsewhere; nothing to take yet


class SearchError(UserError):
    """The search cannot go on: a trial failed as every trial would (bad data or flags)."""


class OtherSearchError(SettingsError):
    """The search folder (or study) holds a search with other settings."""


@dataclasses.dataclass
class SearchSettings:
    search_dir: str
    runner: str  # module name of a fine-tuning runner: run_classifier, run_squad, ...
    runner_flags: list  # the runner's own flags, the same for every trial
    space: SearchSpace
    seeds: int = 1  # seeds per phase-1 configuration
    restarts: int = 0  # new seeds for the chosen configuration (phase 2)
    num_trials: int | None = None  # configurations a sampled search draws
    sampler: str = "tpe"  # a sampled search's sampler: tpe or random
    sampler_seed: int = 0
    prune: bool = True
    prune_startup_trials: int = 4  # finished trials before the median rule may prune
    base_seed: int = 12345  # the first seed; trials use base_seed, base_seed + 1, ...
    metric: str | None = None  # None: the runner's best_metric
    storage: str | None = None  # an Optuna storage URL (default: SEARCH_DIR/study.db)
    study_name: str = "search"
    do_predict: bool = False
    export_dir: str | None = None
    heartbeat_s: int = 20
    poll_s: float = 0.5


@dataclasses.dataclass(frozen=True)
class Slot:
    name: str  # folder name under trials/
    phase: int  # 1: the grid or the samples; 2: restarts of the chosen configuration
    config: str  # the configuration's name (folder name without the seed)
    seed: int
    settings: tuple | None  # ((flag, text), ...); None: a configuration still to be sampled


class Search:
    def __init__(self, settings: SearchSettings):
        self.settings = settings
        self.search_dir = os.path.abspath(settings.search_dir)
        self.trials_dir = os.path.join(self.search_dir, TRIALS_DIR)
        self.failed_here = set()  # slots that failed in this process: not taken again by it
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.study = None
        self.scheduling = None  # the lock the workers schedule under (search.storage)
        self.decisions = []  # seconds each scheduling decision took, the lock's wait included

    # --------------------------------------------------------------------------------- study
    def definition(self) -> dict:
        """What makes two commands the same search (checked when a study is loaded)."""
        s = self.settings
        return {"runner": s.runner, "runner_flags": list(s.runner_flags),
                "space": [d.spec for d in s.space.dimensions], "seeds": s.seeds,
                "restarts": s.restarts, "num_trials": s.num_trials,
                "sampler": s.sampler if not s.space.is_grid else "grid",
                "sampler_seed": s.sampler_seed, "base_seed": s.base_seed, "prune": s.prune,
                "metric": s.metric}

    def open(self) -> None:
        """Open (or create) the study; a refused one (a bad or unreachable --storage, another
        search's settings) leaves nothing that was not there before: no lock file, no study
        file, no folder."""
        existed = existing_paths(self.search_dir, STUDY_FILE, LOCK_FILE)
        try:
            self._open()
        except UserError:
            remove_new_paths(self.search_dir, existed, STUDY_FILE, LOCK_FILE)
            if self.scheduling is not None:
                self.scheduling.close()
            raise

    def _open(self) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # The heartbeat is used through ask-and-tell here, which Optuna calls experimental.
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        s = self.settings
        url = s.storage or f"sqlite:///{os.path.join(self.search_dir, STUDY_FILE)}"
        normalized(url)  # an unsupported database: refused before anything is written
        # A server is reached first: nothing is written when it cannot be.
        self.scheduling = SchedulingLock(url, self.search_dir, s.study_name)
        kwargs = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
        sampler = self.sampler(0)
        pruner = (optuna.pruners.MedianPruner(n_startup_trials=s.prune_startup_trials)
                  if s.prune else optuna.pruners.NopPruner())
        direction = "minimize" if s.metric and lower_is_better(s.metric) else "maximize"
        with self.lock():  # two workers creating the database's tables at once would collide
            try:
                storage = optuna.storages.RDBStorage(normalized(url), engine_kwargs=kwargs,
                                                     heartbeat_interval=s.heartbeat_s,
                                                     grace_period=3 * s.heartbeat_s)
            except (ImportError, ValueError, RuntimeError, OSError) as e:
                raise SettingsError(f"--storage={redacted(url)}: {str(e).splitlines()[0]}") \
                    from None
            except Exception as e:  # sqlalchemy's errors (a host that does not answer, ...)
                if is_server(url):
                    raise connection_error(url, e) from None
                raise SettingsError(f"--storage={redacted(url)}: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0]}") from None
            self.study = optuna.create_study(storage=storage, study_name=s.study_name,
                                             sampler=sampler, pruner=pruner, direction=direction,
                                             load_if_exists=True)
            recorded = self.study.user_attrs.get("definition")
            if recorded is None:
                self.study.set_user_attr("definition", self.definition())
                recorded = {}
            # Keys an earlier version did not record are not compared.
            changed = [f"{key} was {recorded[key]!r}, now {value!r}" for key, value in
                       json.loads(json.dumps(self.definition())).items()
                       if key in recorded and recorded[key] != value]
            if changed:
                raise OtherSearchError(f"{self.search_dir} holds a search with other settings "
                                       f"({'; '.join(changed)}): run it with its own settings, "
                                       f"or use another --search_dir")
        os.makedirs(self.trials_dir, exist_ok=True)

    def sampler(self, sample: int):
        """The sampler that draws sample number `sample`, seeded by the number: any worker draws
        the same configuration for it (one sampler's own sequence would repeat in each worker).
        TPE reads the finished trials from the study, so a fresh one per draw loses nothing."""
        import optuna

        seed = self.settings.sampler_seed * 1_000_003 + sample
        if self.settings.sampler == "random" or self.settings.space.is_grid:
            return optuna.samplers.RandomSampler(seed=seed)
        return optuna.samplers.TPESampler(seed=seed)

    @contextlib.contextmanager
    def lock(self):
        """The scheduling lock: one worker at a time looks at the study and takes a slot
        (`search.storage.SchedulingLock`: a local file lock, or the database server's)."""
        start = time.perf_counter()
        with self.scheduling.held():
            yield
        self.decisions.append(time.perf_counter() - start)

    # --------------------------------------------------------------------------------- the plan
    def phase_one(self, trials) -> list[Slot]:
        s = self.settings
        seeds = [s.base_seed + i for i in range(s.seeds)]
        if s.space.is_grid:
            return [Slot(f"{config_name(cfg)}_seed{seed}", 1, config_name(cfg), seed,
                         tuple(cfg.items())) for cfg in s.space.grid() for seed in seeds]
        sampled = {}  # sample index -> its settings, once drawn
        for trial in trials:
            if trial.user_attrs.get("sample") is not None and trial.user_attrs.get("settings"):
                sampled.setdefault(trial.user_attrs["sample"],
                                   tuple(trial.user_attrs["settings"].items()))
        return [Slot(f"t{i:03d}_seed{seed}", 1, f"t{i:03d}", seed, sampled.get(i))
                for i in range(s.num_trials) for seed in seeds]

    def phase_two(self, chosen) -> list[Slot]:
        s = self.settings
        attrs = chosen.user_attrs
        return [Slot(f"{attrs['config']}_seed{seed}", 2, attrs["config"], seed,
                     tuple(attrs["settings"].items()))
                for seed in range(s.base_seed + s.seeds, s.base_seed + s.seeds + s.restarts)]

    def status(self, slot: Slot, attempts: dict) -> str:
        """done (finished or pruned), busy (running), todo, or given_up (failed here)."""
        from optuna.trial import TrialState

        states = {t.state for t in attempts.get(slot.name, [])}
        if TrialState.COMPLETE in states or TrialState.PRUNED in states:
            return "done"
        if TrialState.RUNNING in states or TrialState.WAITING in states:
            return "busy"
        return "given_up" if slot.name in self.failed_here else "todo"

    def next_slot(self, trials):
        """The slot to run next, WAIT while others run the rest, or None when all is done."""
        attempts = group_attempts(trials)
        waiting = False
        for phase_slots in (lambda: self.phase_one(trials), lambda: self.phase_two_of(trials)):
            slots = phase_slots()
            if slots is WAIT:
                return WAIT
            for slot in slots:
                status = self.status(slot, attempts)
                if status == "todo":
                    return slot
                waiting |= status == "busy"
            if waiting:
                return WAIT
        return None

    def phase_two_of(self, trials):
        """The restarts, of the configuration chosen when they were first planned (kept in the
        study, so that a first-phase trial finished later does not start a second set)."""
        if not self.settings.restarts:
            return []
        pinned = self.study.user_attrs.get("restarted_trial")
        chosen = next((t for t in trials if t.number == pinned), None)
        if chosen is None:
            chosen = self.best_trial(trials, phase=1)
            if chosen is None:
                return []  # phase 1 left no finished trial (all failed here): nothing to restart
            self.study.set_user_attr("restarted_trial", chosen.number)
        return self.phase_two(chosen)

    def best_trial(self, trials, phase: int | None = None):
        from optuna.trial import TrialState

        finished = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
                    and (phase is None or t.user_attrs.get("phase") == phase)]
        if not finished:
            return None
        lower = self.study.direction.name == "MINIMIZE"
        return (min if lower else max)(finished, key=lambda t: t.value)

    # --------------------------------------------------------------------------------- workers
    def run(self) -> None:
        """Take and run slots until every slot is done; then report and promote the chosen."""
        if self.study is None:
            self.open()
        while True:
            with self.lock():
                self.fail_dead_trials()
                trials = self.study.get_trials(deepcopy=False)
                slot = self.next_slot(trials)
                trial = self.start(slot, trials) if isinstance(slot, Slot) else None
            if slot is None:
                break
            if slot is WAIT:
                interrupts.at("waiting for the other workers' trials")
                interrupts.rerun("resumes the search: finished trials are kept")
                time.sleep(max(self.settings.poll_s, 2.0))
                continue
            self.run_slot(slot, trial)
        self.finish()

    def fail_dead_trials(self) -> None:
        """Running trials whose worker is gone: on this machine, a dead process; elsewhere, a
        heartbeat older than its grace period (Optuna's)."""
        import optuna
        from optuna.trial import TrialState

        optuna.storages.fail_stale_trials(self.study)
        host = socket.gethostname()
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            worker = trial.user_attrs.get("worker", "")
            name, _, pid = worker.rpartition(":")
            if name == host and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    self.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
                logger.info("trial %s: its worker (pid %s) is gone; it will resume",
                            trial.user_attrs.get("slot"), pid)

    def start(self, slot: Slot, trials):
        """A new Optuna trial for `slot` (a sample drawn by the sampler when it has none). The
        settings are kept in the trial's `settings` attribute, the flags' texts as written."""
        space = self.settings.space
        if slot.settings is None:
            self.study.sampler = self.sampler(int(slot.config[1:]))
            trial = self.study.ask(space.distributions())
            settings = {name: flag_text(trial.params[name]) for name in space.names()}
        else:  # a grid point, a restart, or a sample taken up again: settings fixed, no draw
            settings = dict(slot.settings)
            trial = self.study.ask()
        from optuna.trial import TrialState

        try:  # the worker first: a trial whose worker dies from here on is seen as such
            trial.set_user_attr("worker", self.worker)
            self.study._storage.record_heartbeat(trial._trial_id)
            attempts = len(group_attempts(trials).get(slot.name, []))
            for key, value in {"slot": slot.name, "search_dir": self.search_dir,
                               "phase": slot.phase, "config": slot.config,
                               "seed": slot.seed, "settings": settings, "attempt": attempts + 1,
                               "sample": int(slot.config[1:]) if slot.config.startswith("t")
                               and not space.is_grid else None}.items():
                trial.set_user_attr(key, value)
        except BaseException:
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            raise
        return trial

    def command(self, slot_name: str, settings: dict, seed: int, *extra) -> list:
        return ["-m", f"bert_tf2.{self.settings.runner}", *self.settings.runner_flags,
                *flags_of(settings), f"--random_seed={seed}", f"--output_dir={os.path.join(self.trials_dir, slot_name)}",
                *extra]

    def run_slot(self, slot: Slot, trial) -> None:
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        settings = trial.user_attrs["settings"]
        trial_dir = os.path.join(self.trials_dir, slot.name)
        log_path = trial_dir + ".log"
        command = self.command(slot.name, settings, slot.seed, "--do_train", "--do_eval")
        done = self.count_done()
        logger.info("trial %s (%s, %d of %d done): %s", slot.name,
                    "restart" if slot.phase == 2 else "grid" if self.settings.space.is_grid
                    else "sample", done, self.planned(),
                    " ".join(flags_of(settings)) or "the runner's flags as given")
        interrupts.at(f"in trial {slot.name}")
        interrupts.rerun(f"resumes the search: finished trials are kept and {slot.name} "
                         f"resumes from its last checkpoint")
        last_beat = [time.time()]
        watcher = EvaluationWatcher(self, trial, slot, trial_dir)
        watcher.recorded()  # a resumed trial's metric, even if it evaluates nothing more

        def tick():
            if time.time() - last_beat[0] >= self.settings.heartbeat_s / 2:
                self.study._storage.record_heartbeat(trial._trial_id)
                last_beat[0] = time.time()

        try:
            outcome = run_trial(command, trial_dir, log_path, watcher.on_evaluation, tick,
                                self.settings.poll_s)
        except BaseException:
            with contextlib.suppress(Exception):
                self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            raise
        try:
            self.record_outcome(slot, trial, watcher, outcome, trial_dir, log_path)
        except UpdateFinishedTrialError:
            logger.warning("trial %s was taken up by another worker while this one ran it (its "
                           "heartbeat was late); this worker's result is dropped", slot.name)

    def record_outcome(self, slot, trial, watcher, outcome, trial_dir, log_path) -> None:
        from optuna.trial import TrialState

        previous = sum(t.user_attrs.get("wall_s", 0.0) for t in group_attempts(
            self.study.get_trials(deepcopy=False)).get(slot.name, []) if t.number != trial.number)
        trial.set_user_attr("wall_s", round(previous + outcome.wall_s, 1))
        watcher.record_best()
        runner_error = outcome.last_line.startswith(f"{self.settings.runner}.py: error: ")
        if outcome.returncode == 0:
            score = watcher.best_score()
            if score is None:
                self.fail(trial, slot, f"finished without {watcher.metric or 'a dev score'} in "
                                       f"{os.path.join(trial_dir, BEST_DIR, RESULTS_FILE)}")
                return
            self.study.tell(trial, score)
            logger.info("trial %s finished: %s = %.4f (%.0f s)", slot.name, watcher.metric, score,
                        outcome.wall_s)
        elif outcome.pruned:
            self.study.tell(trial, state=TrialState.PRUNED)
            logger.info("trial %s pruned after epoch %s: %s = %.4f is worse than the median of "
                        "the trials before it at that epoch", slot.name, watcher.last_step,
                        watcher.metric, watcher.last_value)
        elif runner_error and " in use by " in outcome.last_line:
            # The runner of a worker that just died (or of one on a machine whose heartbeat
            # stopped) still holds the folder; the trial is taken up again once it lets go.
            trial.set_user_attr("error", outcome.last_line)
            self.study.tell(trial, state=TrialState.FAIL)
            logger.info("trial %s: its folder is still held by another process; trying again "
                        "shortly", slot.name)
            time.sleep(5)
        elif runner_error and outcome.returncode in (1, 2):
            # A user error (bad data, flags, files): every trial would fail the same way.
            trial.set_user_attr("error", outcome.last_line)
            self.study.tell(trial, state=TrialState.FAIL)
            raise SearchError(f"trial {slot.name} ({log_path}): {outcome.last_line}")
        else:  # a crash (out of memory, a bug): this trial only
            self.fail(trial, slot, f"exit status {outcome.returncode}: {outcome.last_line} "
                                   f"(log: {log_path})")

    def fail(self, trial, slot: Slot, why: str) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr("error", why)
        self.study.tell(trial, state=TrialState.FAIL)
        self.failed_here.add(slot.name)
        logger.warning("trial %s failed (%s); the search goes on, and the same command takes it "
                       "up again later", slot.name, why)

    def planned(self) -> int:
        s = self.settings
        configs = len(s.space.grid()) if s.space.is_grid else s.num_trials
        return configs * s.seeds + s.restarts

    def count_done(self) -> int:
        from optuna.trial import TrialState

        return len({t.user_attrs.get("slot") for t in self.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))})

    # --------------------------------------------------------------------------------- the end
    def finish(self) -> None:
        """Write the report, promote the chosen trial to best/, predict and export with it (once
        for a chosen trial and a set of outputs, whichever worker gets there first)."""
        with self.lock():
            trials = self.study.get_trials(deepcopy=False)
            chosen = self.best_trial(trials)
            metric = self.metric_name(trials)
            paths = report.write(self.search_dir, trials, metric,
                                 self.study.direction.name == "MINIMIZE",
                                 self.settings.space.names(), chosen)
            if chosen is None:
                raise SearchError(f"no trial finished; see the logs in {self.trials_dir}")
            self.promote(chosen)
            if self.ran_here(chosen):
                logger.info("chosen: trial %s, %s = %.4f; its weights are in %s",
                            chosen.user_attrs["slot"], metric, chosen.value,
                            os.path.join(self.search_dir, BEST_DIR))
            for path in paths:
                logger.info("wrote %s", path)
            if self.decisions:
                logger.info("%d scheduling decisions, %.0f ms each on average (%s)",
                            len(self.decisions),
                            1000 * sum(self.decisions) / len(self.decisions),
                            "the database's lock" if is_server(self.settings.storage)
                            else "the folder's lock")
            if (self.settings.do_predict or self.settings.export_dir) and self.ran_here(chosen):
                self.predict_and_export(chosen)

    def metric_name(self, trials) -> str:
        names = {t.user_attrs.get("metric") for t in trials} - {None}
        return self.settings.metric or (names.pop() if len(names) == 1 else "dev score")

    def ran_here(self, trial) -> bool:
        """Whether `trial`'s folder is this worker's: the same machine and search folder (with a
        database server, each machine keeps the trials it ran in its own folder)."""
        host = trial.user_attrs.get("worker", "").rpartition(":")[0]
        return (host == socket.gethostname()
                and trial.user_attrs.get("search_dir", self.search_dir) == self.search_dir)

    def promote(self, chosen) -> None:
        """Copy the chosen trial's best/ weights to SEARCH_DIR/best/ (with trial.json), where the
        trial ran; elsewhere, say where its weights are."""
        target = os.path.join(self.search_dir, BEST_DIR)
        slot = chosen.user_attrs["slot"]
        if not self.ran_here(chosen):
            host = chosen.user_attrs.get("worker", "").rpartition(":")[0]
            logger.info("the chosen trial %s ran on %s, in %s: its worker promotes its weights "
                        "to best/ there (this worker's folder does not hold them)", slot, host,
                        chosen.user_attrs.get("search_dir"))
            return
        current = os.path.join(target, CHOSEN_FILE)
        if os.path.isfile(current):
            with open(current, encoding="utf-8") as f:
                if json.load(f).get("slot") == slot:
                    return
        source = os.path.join(self.trials_dir, slot, BEST_DIR)
        recover_directory(target)
        with staged_directory(target) as staging:
            os.makedirs(staging)
            for name in os.listdir(source):
                if os.path.isfile(os.path.join(source, name)):
                    shutil.copyfile(os.path.join(source, name), os.path.join(staging, name))
            write_text(os.path.join(staging, CHOSEN_FILE), json.dumps({
                "slot": slot, "trial_dir": os.path.join(self.trials_dir, slot),
                "settings": chosen.user_attrs["settings"], "seed": chosen.user_attrs["seed"],
                "metric": self.metric_name([chosen]), "score": chosen.value,
                "command": ["python", *self.command(slot, chosen.user_attrs["settings"],
                                                    chosen.user_attrs["seed"], "--do_train",
                                                    "--do_eval")]}, indent=1) + "\n")

    def predict_and_export(self, chosen) -> None:
        """Run the runner on the chosen trial's folder with --do_predict / --export_dir, unless
        that was done for this trial already (recorded in best/trial.json)."""
        slot = chosen.user_attrs["slot"]
        export_dir = os.path.abspath(self.settings.export_dir) if self.settings.export_dir else None
        record_path = os.path.join(self.search_dir, BEST_DIR, CHOSEN_FILE)
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        done = record.get("outputs", {})
        if ((not self.settings.do_predict or done.get("do_predict"))
                and (not export_dir or (export_dir in done.get("export_dirs", [])
                                        and os.path.isdir(export_dir)))):
            return
        extra = ["--nodo_train", "--nodo_eval"]
        if self.settings.do_predict:
            extra.append("--do_predict")
        if export_dir:
            extra.append(f"--export_dir={export_dir}")
        command = self.command(slot, chosen.user_attrs["settings"], chosen.user_attrs["seed"],
                               *extra)
        log_path = os.path.join(self.trials_dir, slot) + ".log"
        interrupts.at(f"predicting and exporting with trial {slot}")
        interrupts.rerun("predicts and exports with the chosen trial again")
        outcome = run_trial(command, os.path.join(self.trials_dir, slot), log_path,
                            lambda results: False, poll_s=self.settings.poll_s)
        if outcome.returncode != 0:
            raise SearchError(f"predicting with trial {slot} ({log_path}): {outcome.last_line}")
        record["outputs"] = {
            "do_predict": bool(done.get("do_predict") or self.settings.do_predict),
            "export_dirs": sorted(set(done.get("export_dirs", [])) | ({export_dir} - {None}))}
        write_text(record_path, json.dumps(record, indent=1) + "\n")
        done_what = " and ".join(
            ([f"predicted (files in {os.path.join(self.trials_dir, slot)})"]
             if self.settings.do_predict else []) + ([f"exported to {export_dir}"]
                                                     if export_dir else []))
        logger.info("trial %s %s", slot, done_what)


class EvaluationWatcher:
    """A trial's evaluations as the runner writes them: reported to the study (step = the epoch
    the evaluation closes), and the median rule asked whether to go on (phase 1 only)."""

    def __init__(self, search: Search, trial, slot: Slot, trial_dir: str):
        self.search = search
        self.trial = trial
        self.slot = slot
        self.trial_dir = trial_dir
        self.metric = search.settings.metric
        self.last_step = None
        self.last_value = None

    def recorded(self) -> dict:
        """The trial run's run_config.json; fills in the metric its best/ is kept by and the
        steps it plans (a resumed run that evaluates nothing more still has them)."""
        recorded = read_run_config(self.trial_dir) or {}
        self.metric = self.metric or recorded.get("best_metric")
        steps = (recorded.get("training") or {}).get("num_train_steps")
        if steps and self.trial.user_attrs.get("num_train_steps") != steps:
            self.trial.set_user_attr("num_train_steps", steps)
        if self.metric and self.trial.user_attrs.get("metric") != self.metric:
            self.trial.set_user_attr("metric", self.metric)
        return recorded

    def on_evaluation(self, results: dict) -> bool:
        """Report the evaluation; True stops the run: pruned, or taken up by another worker
        (this one's heartbeat was late)."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            return self._report(results)
        except UpdateFinishedTrialError:
            return True

    def _report(self, results: dict) -> bool:
        recorded = self.recorded()
        if self.metric not in results:
            raise SettingsError(f"--metric={self.metric}: trial {self.slot.name}'s evaluation "
                                f"has {', '.join(sorted(results))}")
        num_train_steps = (recorded.get("training") or {}).get("num_train_steps")
        global_step = int(results.get("global_step", 0))
        self.trial.set_user_attr("steps_trained", global_step)
        step = epoch_of(global_step, num_train_steps, self.search.settings,
                        self.trial.user_attrs["settings"])
        value = results[self.metric]
        self.last_step, self.last_value = step, value
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a step reported again after a resume
            self.trial.report(value, step)
        logger.info("trial %s: epoch %d (step %d): %s = %.4f", self.slot.name, step,
                    global_step, self.metric, value)
        self.record_best()
        last = bool(num_train_steps) and global_step >= num_train_steps  # nothing left to save
        return (self.prunable() and not last and self.trial.should_prune())

    def prunable(self) -> bool:
        """Only a configuration's first run is pruned: its further seeds and the restarts
        measure the spread, which pruning the low ones would flatter."""
        settings = self.search.settings
        return settings.prune and self.slot.phase == 1 and self.slot.seed == settings.base_seed

    def best_score(self) -> float | None:
        self.recorded()
        best = read_eval_results(os.path.join(self.trial_dir, BEST_DIR, RESULTS_FILE))
        return best.get(self.metric) if self.metric else None

    def record_best(self) -> None:
        self.recorded()
        best = read_eval_results(os.path.join(self.trial_dir, BEST_DIR, RESULTS_FILE))
        if self.metric and self.metric in best:
            self.trial.set_user_attr("best_score", best[self.metric])
            self.trial.set_user_attr("best_step", int(best.get("global_step", 0)))


def epoch_of(global_step: float, num_train_steps: int | None, settings: SearchSettings,
             trial_settings: dict) -> int:
    """The epoch an evaluation closes (1, 2, ...): the step trials are compared at."""
    epochs = float(trial_settings.get("num_train_epochs", flag_value(
        settings.runner_flags, "num_train_epochs", "3")))
    if not num_train_steps or epochs <= 0:
        return int(global_step)
    # Epoch ends are rounded steps (an epoch of 203.75 steps ends at step 204), the last one is
    # num_train_steps: the nearest whole epoch, halves up (2.5 epochs end as epoch 3).
    return max(1, math.floor(global_step / (num_train_steps / epochs) + 0.5))


def group_attempts(trials) -> dict:
    attempts = {}
    for trial in trials:
        slot = trial.user_attrs.get("slot")
        if slot:
            attempts.setdefault(slot, []).append(trial)
    return attempts


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def existing_paths(folder: str, *names: str) -> set:
    """Which of `folder`, its parents and `folder/NAME` exist now."""
    paths = {os.path.join(folder, name) for name in names}
    while folder and folder != os.path.dirname(folder):
        paths.add(folder)
        folder = os.path.dirname(folder)
    return {path for path in paths if os.path.lexists(path)}


def remove_new_paths(folder: str, existed: set, *names: str) -> None:
    """Remove the files `names` in `folder` and the empty folders up from it that were not in
    `existed` (what a refused start made)."""
    for name in names:
        path = os.path.join(folder, name)
        if path not in existed and os.path.lexists(path):
            os.remove(path)
    while folder and folder not in existed and folder != os.path.dirname(folder):
        try:
            os.rmdir(folder)  # only an empty folder
        except OSError:
            return
        folder = os.path.dirname(folder)
