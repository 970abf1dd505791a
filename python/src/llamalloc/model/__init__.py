"""The lifetime model: its classes and size buckets (classes), tokens of stack traces (tokenizer), the model file
(modelfile) and its reference inference (reference), training and evaluation (dataset, lstm, baselines, metrics,
pipeline; JAX loads with lstm only), and its benchmarks. Importing the package loads none of them."""
