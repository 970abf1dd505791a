"""The Python copy of the shared vocabulary (llamalloc.model.classes) agrees with src/llamalloc/vocabulary.h, as
printed by `llamalloc-options --vocabulary`: lifetime class bounds, the never-freed class, the model's size
bucket, and the profile's size bucket as the model sees it."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from llamalloc.model import classes
from llamalloc.paths import native_program


@pytest.fixture(scope="module")
def vocabulary():
    r = subprocess.run([str(native_program("src/llamalloc/llamalloc-options")), "--vocabulary"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_lifetime_classes(vocabulary):
    assert classes.NUM_CLASSES == vocabulary["max_classes"]
    assert classes.NEVER_FREED == vocabulary["never_freed_class"]
    assert list(classes.CLASS_UPPER_BOUNDS_NS) == vocabulary["class_bounds_ns"]
    assert len(classes.CLASS_NAMES) == len(classes.LIFETIME_NAMES) == vocabulary["max_classes"]
    # The class after the bounded ones holds every longer lifetime; the last is "never freed".
    assert len(vocabulary["class_bounds_ns"]) == vocabulary["longest_lifetime_class"]
    assert vocabulary["longest_lifetime_class"] == vocabulary["never_freed_class"] - 1


def test_model_size_bucket(vocabulary):
    assert classes.MODEL_SIZE_BUCKETS == vocabulary["model_size_buckets"]
    assert classes.SMALLEST_MODEL_SIZE_BUCKET == vocabulary["smallest_model_size_bucket"]
    sizes = np.array(vocabulary["sizes"], dtype=np.int64)
    assert classes.model_size_bucket(sizes).tolist() == vocabulary["model_size_bucket"]


def test_a_profiles_size_bucket_has_the_model_bucket_of_its_sizes(vocabulary):
    # Training sees a profile's bucket bound where the process sees the exact size: both get one model bucket.
    bounds = np.array(vocabulary["profile_size_bucket"], dtype=np.int64)
    assert classes.model_size_bucket(bounds).tolist() == vocabulary["model_size_bucket"]


def test_the_model_size_bucket_has_one_name():
    for old in ("size_class", "NUM_SIZE_CLASSES", "SMALLEST_SIZE_CLASS"):
        assert not hasattr(classes, old), old


def test_the_class_of_a_lifetime_is_one_function(vocabulary):
    # (top and agreement take a lifetime's class from classes.lifetime_class.)
    bounds = vocabulary["class_bounds_ns"]
    lifetimes = [0, bounds[0] - 1, bounds[0], bounds[-1] - 1, bounds[-1], 10 * bounds[-1], -1]
    assert classes.lifetime_class(lifetimes).tolist() == [0, 0, 1, 5, 6, 6, vocabulary["never_freed_class"]]
    from llamalloc import agreement
    assert agreement.lifetime_classes is classes.lifetime_class
