"""PredGen: prediction through generation (tasks, prompts, answer formats)."""
