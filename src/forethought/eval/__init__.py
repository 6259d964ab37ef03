"""Evaluation shared by every system: judge gen-PPL + unigram entropy + MAUVE features (one judge pass), MAUVE,
sampling cost (FLOPs, throughput, serial depth), matched-entropy comparison. Knows nothing of any method."""
