"""`llamalloc evaluate MODEL PROFILE...`: the accuracy report of a trained model on other profiles."""
from __future__ import annotations

import click


@click.command("evaluate")
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("profiles", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--list", "list_n", type=click.IntRange(0, None), default=0, metavar="N",
              help="Print the N mispredicted contexts that weigh most (bytes), like pprof's -list.")
@click.option("--label", default=None, metavar="RULE",
              help="Label rule of the profiles' contexts (mode, shareNN, median, pNN); default: the model's own.")
def command(model, profiles, list_n, label):
    """Report how MODEL predicts the lifetimes observed in PROFILE... (e.g. another revision of the program).

    Prints the LSTM's and the baselines' weighted, unweighted and off-by-one accuracy and confusion matrices,
    and the fraction of the profiles' stack traces that exactly match one seen in training."""
    from ..model.pipeline import run_evaluate

    run_evaluate(model, profiles, list_n=list_n, label=label)
