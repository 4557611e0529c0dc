"""Search fine-tuning settings the way the paper did: a grid (or samples) with random restarts,
chosen on dev, reported with the spread.

Every trial is an ordinary run of a fine-tuning runner (run_classifier, run_squad, run_ner,
run_multiple_choice) in its own folder, `SEARCH_DIR/trials/NAME/`, with the runner's flags given
after `--` and the searched flags added. Optuna keeps the study in `SEARCH_DIR/study.db` (or any
`--storage`), so the same command resumes a killed search and several workers share one. The
search writes `trials.tsv`, `configurations.tsv` (mean, standard deviation and expected best of k
per configuration), `report.md` and `expected_validation_performance.png`, and copies the chosen
trial's weights to `SEARCH_DIR/best/`; `--do_predict` and `--export_dir` predict and export with it.

    python run_search.py --runner=run_classifier --search_dir=out/mrpc-search --preset=paper \
        --restarts=5 -- --task_name=MRPC --data_dir=glue/MRPC --init_checkpoint=MODEL_DIR
    python run_search.py --runner=run_classifier --search_dir=out/mrpc-seeds --seeds=5 -- ...
    python run_search.py --runner=run_ner --search_dir=out/ner-tpe --num_trials=20 \
        --space='learning_rate=loguniform(1e-5,1e-4)' --space='warmup_proportion=uniform(0,0.2)' \
        -- --data_dir=conll2003 --init_checkpoint=MODEL_DIR
"""
from __future__ import annotations

from absl import flags

from bert_tf2 import runner_flags
from bert_tf2.process import flag_ranges
from bert_tf2.process.errors import SettingsError

FLAGS = flags.FLAGS

flags.DEFINE_string("runner", None, "The fine-tuning runner each trial runs: run_classifier, "
                    "run_squad, run_ner or run_multiple_choice.")
flags.DEFINE_string("search_dir", None, "The search's folder: study.db, trials/, the tables, the "
                    "plot and best/.")
flags.DEFINE_enum("preset", None, ["paper"], "paper: learning rate 5e-5, 4e-5, 3e-5, 2e-5 x batch "
                  "16, 32 x epochs 2, 3, 4 (Devlin et al. 2019, appendix A.3).")
flags.DEFINE_multi_string("grid", None, "NAME=V1,V2,...: a runner flag and its values; every "
                          "combination of the --grid (and --preset) dimensions runs.")
flags.DEFINE_multi_string("space", None, "NAME=loguniform(LOW,HIGH), uniform(LOW,HIGH), "
                          "int(LOW,HIGH) or choice(V1,V2,...): a runner flag sampled by "
                          "--sampler for --num_trials configurations.")
flags.DEFINE_enum("sampler", "tpe", ["tpe", "random"], "How a --space search draws its "
                  "configurations: Optuna's TPE (Bayesian) or independent random draws.")
flags.DEFINE_integer("num_trials", None, "Configurations a --space search draws.")
flags.DEFINE_integer("sampler_seed", 0, "Seed of the sampler's draws.")
flags.DEFINE_integer("seeds", 1, "Runs (random restarts) of every configuration, with seeds "
                     "--random_seed, --random_seed + 1, ...; only the first run of a "
                     "configuration is ever pruned.")
flags.DEFINE_integer("restarts", 0, "After the search: runs of the best configuration with this "
                     "many new seeds (the paper's random restarts), never pruned.")
flags.DEFINE_integer("random_seed", 12345, "The first trial seed (the runners' default).")
flags.DEFINE_bool("prune", True, "Stop a trial after an epoch whose dev score is below the median "
                  "of the earlier trials' at that epoch (Optuna's MedianPruner).")
flags.DEFINE_integer("prune_startup_trials", 4, "Trials that finish before any is pruned.")
flags.DEFINE_string("metric", None, "The eval_results.txt key to choose by (default: the "
                    "runner's --best_metric, the key its best/ weights are kept by).")
flags.DEFINE_string("storage", None, "Where the study lives (default: "
                    "sqlite:///SEARCH_DIR/study.db, the workers of one machine); "
                    "postgresql://USER:PASSWORD@HOST:PORT/DATABASE for workers on several "
                    "machines, which then share nothing else (docs/search.md).")
flags.DEFINE_string("study_name", "search", "The study's name in --storage.")
flags.DEFINE_bool("do_predict", False, "Predict the runner's prediction split with the chosen "
                  "trial (its files land in the chosen trial's folder).")
flags.DEFINE_string("export_dir", None, "Export the chosen trial as a SavedModel here.")
flags.DEFINE_integer("heartbeat_seconds", 20, "How often a worker says its trial is alive; a "
                     "trial silent for three times this on another machine is taken up again.")
flag_ranges.at_least_one("seeds", "num_trials", "heartbeat_seconds")
flag_ranges.check("restarts", 0)
flag_ranges.check("prune_startup_trials", 0)
flag_ranges.check("random_seed", 0, 2**31 - 1)


def settings_from_flags(argv: list):
    from bert_tf2.search.runner_check import check_command_lines, runner_flags_for, runner_module
    from bert_tf2.search.space import SearchSpace, flags_of
    from bert_tf2.search.study import SearchSettings

    if not FLAGS.search_dir:
        raise SettingsError("--search_dir is required")
    runner = runner_module(FLAGS.runner)
    space = SearchSpace.from_flags(FLAGS.preset, FLAGS.grid, FLAGS.space)
    if space.is_grid and FLAGS.num_trials:
        raise SettingsError("--num_trials: a grid runs every combination; --num_trials is for "
                            "--space")
    if not space.is_grid and not FLAGS.num_trials:
        raise SettingsError("--num_trials is required with --space (how many configurations to "
                            "draw)")
    given, metric = runner_flags_for(argv[1:], space, FLAGS.metric, FLAGS.prune)
    settings = space.texts_to_check()
    check_command_lines(runner, [given + flags_of(s) + [
        f"--random_seed={FLAGS.random_seed}", "--output_dir=trial", "--do_train", "--do_eval"]
        for s in settings], [" ".join(flags_of(s)) or "the runner's flags" for s in settings],
        metric, "--metric" if FLAGS.metric else "the runner's --best_metric")
    return SearchSettings(
        search_dir=FLAGS.search_dir, runner=runner, runner_flags=given, space=space,
        seeds=FLAGS.seeds, restarts=FLAGS.restarts, num_trials=FLAGS.num_trials,
        sampler=FLAGS.sampler, sampler_seed=FLAGS.sampler_seed, prune=FLAGS.prune,
        prune_startup_trials=FLAGS.prune_startup_trials, base_seed=FLAGS.random_seed,
        metric=metric, storage=FLAGS.storage, study_name=FLAGS.study_name,
        do_predict=FLAGS.do_predict, export_dir=FLAGS.export_dir,
        heartbeat_s=FLAGS.heartbeat_seconds)


def main(argv):
    try:
        import matplotlib  # noqa: F401
        import optuna  # noqa: F401
    except ImportError as e:
        raise SettingsError(f"run_search needs Optuna and matplotlib ({e}): pip install "
                            f"'bert-tf2[search]'") from None
    from bert_tf2.search.study import Search

    runner_flags.setup_logging()
    Search(settings_from_flags(argv)).run()


def console_main():
    runner_flags.main(main)


if __name__ == "__main__":
    console_main()
