"""`llamalloc train PROFILE... -o MODEL`: label calling contexts, train the lifetime model, report, export."""
from __future__ import annotations

import click

from ..errors import UserError
from ..model.classes import DEFAULT_LABEL_RULE, DEFAULT_TARGET, DEFAULT_WEIGHT_POWER, TARGETS
from ..model.tokenizer import DEFAULT_MAX_TOKENS, DEFAULT_VOCAB_WORDS


@click.command("train")
@click.argument("profiles", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(), help="Model file to write.")
@click.option("--holdout", type=float, default=0.2, show_default=True,
              help="Fraction of the stacks kept out of training and reported on (0: report on training data).")
@click.option("--holdout-profile", "holdout_profiles", multiple=True, type=click.Path(dir_okay=False),
              help="Report on the contexts of this profile instead (repeatable); all PROFILES train.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--epochs", type=click.IntRange(1, 10000), default=100, show_default=True,
              help="Most epochs; training stops earlier on a validation plateau.")
@click.option("--hidden", type=click.Choice(["64", "16"]), default="64", show_default=True,
              help="LSTM hidden state size (the LLAMA paper's 64, or its small 16 variant).")
@click.option("--vocab", "vocab_words", type=click.IntRange(0, 10_000_000), default=DEFAULT_VOCAB_WORDS,
              show_default=True, help="Number of most common tokens kept; the others are <unk>.")
@click.option("--max-tokens", type=click.IntRange(2, 4096), default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Longest token sequence of a context (outermost frames are cut).")
@click.option("--weight-power", type=click.FloatRange(0.0, 1.0), default=DEFAULT_WEIGHT_POWER, show_default=True,
              help="A context weighs count**POWER in the loss: 1 weights by observed count (the LLAMA paper), smaller "
                   "values let rare contexts be heard (docs/model.md).")
@click.option("--refit/--no-refit", default=True, show_default=True,
              help="After reporting on the held-out stacks, retrain on every context for the epochs the split "
                   "run kept and write that model (--no-refit writes the model that never saw the held-out "
                   "stacks).")
@click.option("--list", "list_n", type=click.IntRange(0, None), default=0, metavar="N",
              help="Print the N mispredicted contexts that weigh most (bytes), like pprof's -list.")
@click.option("--label", default=DEFAULT_LABEL_RULE, show_default=True, metavar="RULE",
              help="Label of a context: shareNN (the longest class holding at least NN% of its objects, or the "
                   "mode), mode (the class holding most of them), median, or pNN (the class of the NN-th percentile "
                   "of its lifetimes; p95 is the LLAMA paper's rule).")
@click.option("--under-weight", type=click.FloatRange(1.0, 100.0), default=1.0, show_default=True,
              help="Cost of predicting a shorter class than the label, relative to the plain cross-entropy "
                   "(1: symmetric). Under-prediction pins pages; over-prediction only delays reuse. "
                   "--target label only.")
@click.option("--target", type=click.Choice(TARGETS), default=DEFAULT_TARGET, show_default=True,
              help="What the model learns: each context's label, or its class distribution (the share of its "
                   "objects in each class), the class then being the --label rule applied to the predicted "
                   "distribution, also for contexts never seen.")
@click.option("--program", "programs", multiple=True, metavar="NAME",
              help="With a corpus: train on this program's contexts only (its path or file name; repeatable).")
@click.option("--build", "builds", multiple=True, metavar="ID",
              help="With a corpus: train on this build's contexts only (a GNU build id or a prefix; repeatable).")
@click.pass_context
def command(ctx, profiles, output, holdout, holdout_profiles, seed, epochs, hidden, vocab_words, max_tokens,
            weight_power, refit, list_n, label, under_weight, target, programs, builds):
    """Train the lifetime model on PROFILE... (from `llamalloc record`, symbolized, or corpus folders from
    `llamalloc aggregate`) and write MODEL.

    Prints, for the LSTM and the exact-match and allocation-site baselines, the weighted and unweighted
    accuracy, off-by-one accuracy and confusion matrix on held-out contexts, then (unless --no-refit) retrains
    on all contexts and writes that model. Progress goes to stderr."""
    if holdout_profiles and ctx.get_parameter_source("holdout") is not click.core.ParameterSource.DEFAULT:
        raise UserError("give either --holdout or --holdout-profile, not both")
    import functools

    from ..fleet import corpus

    if (programs or builds) and not any(corpus.is_corpus(p) for p in profiles):
        raise UserError("--program and --build select the partitions of a corpus: give a corpus folder")

    from ..model.pipeline import load_samples, run_train  # JAX loads only when training

    run_train(profiles, output, load=functools.partial(load_samples, programs=programs, builds=builds), holdout=0.0 if holdout_profiles else holdout, holdout_profiles=holdout_profiles,
              seed=seed, epochs=epochs, hidden=int(hidden), vocab_words=vocab_words, max_tokens=max_tokens,
              weight_power=weight_power, refit=refit, list_n=list_n, label=label, under_weight=under_weight,
              target=target)
