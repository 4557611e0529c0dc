"""One folder per task, each holding everything that task owns: file readers, feature conversion,
loss and metrics, scoring, post-processing and serving; `engine.task` says what a task gives the
driver, `tensors` holds what every task's tensors share."""
