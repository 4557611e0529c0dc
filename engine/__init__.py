"""The shared engine: the training loop, distribution, and the drivers that run any task from its
settings to its result files (`finetuning.finetune`, `pretraining.pretrain`), with SavedModel
export. Knows tasks only through the interface it defines in `engine.task`, never by name."""
