"""What a real_data config asks of a machine before any job starts: the cross-key checks, the
memory estimate of its largest run (with an .npz read whole) and the work of each run."""
from __future__ import annotations

import numpy as np

from nqf.experiments.real_data.runs import ATTENTION, SCREEN, n_train_of, run_config


def check(cfg: dict) -> list[tuple[str, str]]:
    """Cross-key problems found before any job starts: (key path, sentence) pairs."""
    from nqf.data.datasets import IMAGE_SHAPE, IMAGES

    problems = []
    if cfg["screen"] and ATTENTION not in cfg["architectures"]:
        return [("screen", f"screens readings of the attention ({ATTENTION}), which architectures does not "
                           f"list; add it or remove screen.")]
    name = cfg["dataset"]
    if cfg.get("path") and name != "mnist_npz":
        return [("path", f"is read only with dataset mnist_npz, and dataset is {name}, whose images would be "
                         f"trained on instead; set dataset: mnist_npz to use the file, or remove path.")]
    if isinstance(cfg["n_train"], dict):
        missing = [a for a in cfg["architectures"] if a not in cfg["n_train"]]
        if missing:
            return [("n_train", f"gives no count for {', '.join(missing)}; give one per architecture or an integer.")]
    n_total = max(n_train_of(cfg, a) for a in cfg["architectures"])
    if name in IMAGES:
        if n_total + cfg["n_test"] > IMAGES[name]:
            problems.append(("n_train", f"n_train + n_test = {n_total + cfg['n_test']} exceeds the "
                                        f"{IMAGES[name]} images of {name}; lower n_train or n_test."))
        kernel, shape = cfg["sizes"]["cnn"]["kernel"], IMAGE_SHAPE[name]
        if "cnn" in cfg["architectures"] and any(k > n for k, n in zip(kernel, shape)):
            problems.append(("sizes.cnn.kernel", f"kernel {kernel} does not fit the {shape[0]}x{shape[1]} images "
                                                  f"of {name}; use at most {list(shape)}."))
    elif not cfg.get("path"):
        problems.append(("path", "dataset mnist_npz reads a local .npz; set path to it (x_train, y_train, "
                                 "x_test, y_test)."))
    else:
        from nqf.data.validate_npz import npz_problems

        found, shape = npz_problems(cfg["path"], n_total, cfg["n_test"])
        problems += found
        kernel = cfg["sizes"]["cnn"]["kernel"]
        if shape and "cnn" in cfg["architectures"] and any(k > n for k, n in zip(kernel, shape)):
            problems.append(("sizes.cnn.kernel", f"kernel {kernel} does not fit the {shape[0]}x{shape[1]} images "
                                                  f"of {cfg['path']}; use at most {list(shape)}."))
    return problems


def estimate(cfg: dict) -> dict:
    """The largest run (nqf.experiments.machine): the images (train and test, float64, 28x28 for
    MNIST, as the data stage holds them) and the recorded trajectories of every seed; the module
    and its NQF themselves are small (p weights of a few hundred units). With dataset mnist_npz,
    the data job first reads the file's four arrays whole, in their own dtype: their bytes come
    from the arrays' headers (their shapes and dtypes), whatever the file's compressed size; where
    they are the largest part, ``refusal`` is the sentence for a machine too small."""
    from nqf.experiments.machine import generic_estimate

    side = image_side(cfg)
    counts = cfg["n_train"]  # a mapping missing an architecture is refused by check, after this
    n = max(int(counts.get(a, 0)) if isinstance(counts, dict) else int(counts) for a in cfg["architectures"])
    n += int(cfg["n_test"])
    arrays = None
    if cfg["dataset"] == "mnist_npz" and cfg.get("path"):
        from nqf.data.validate_npz import image_shape, npz_arrays

        arrays = npz_arrays(cfg["path"])  # None for a file check() refuses
        side = (image_shape(arrays["x_train"][0]) if arrays else None) or side
    loss = generic_estimate(cfg)
    images = 8 * 3 * n * side[0] * side[1] + 4 * loss["bytes"]
    out = {"bytes": images, "key": "n_train", "what": f"{n} images of {side[0]}x{side[1]}",
           "steps": _largest_steps(cfg)}
    if arrays is not None:
        out.update(_npz_part(cfg["path"], arrays, n, images))
    return out


def work(cfg: dict, run: str) -> dict:
    """What run ``run`` computes (nqf.experiments.work.run_work): each step the seeds' module on
    its training images (counted on the meta device) and its NQF (as many operations), each record
    about RECORD_STEPS steps. The screen run, per screened reading: the NQF trained alone (the
    module's operations, few FLOPs) and, at each record, the module's forward on the training and
    test images (a third of a step's FLOPs per image)."""
    from nqf.experiments.work import RECORD_STEPS, form_bytes, module_work

    rc = run_config(cfg, run)
    side = image_side(cfg)
    n_train, n_record, n_test = int(rc["n_train"]), int(cfg["n_record"]), int(cfg["n_test"])
    arch, size, build_kwargs = rc["architecture"], rc["size"], {"image": side, "n_outputs": 1}
    flops, ops, nbytes = module_work(arch, size, len(cfg["seeds"]), n_train, build_kwargs)
    # held besides: the NQF's form of the test images all run long, and while the NQF trains its
    # form of the training images and its step (the module's activations are gone by then)
    form_test = form_bytes(arch, size, n_test, build_kwargs)
    nqf_step = form_bytes(arch, size, n_train, build_kwargs, replicas=len(cfg["seeds"]))
    if run != SCREEN:
        return {"steps": int(rc["steps"]) + RECORD_STEPS * n_record, "flops": flops, "ops": 2 * ops,
                "bytes": max(nbytes, nqf_step) + form_test}
    readings = len(rc["screen"])
    evaluated = flops / 3 * (n_train + n_test) / n_train
    # a reading's least-squares floor is computed after its NQF has trained: its float64 forms
    # and features of every image (the run's dtype scales the counted bytes, so counted twice
    # for a float32 run)
    floor = form_bytes(arch, size, n_train + n_test, build_kwargs, features=True)
    floor *= 2.0 if rc["dtype"] == "float32" else 1.0
    return {"steps": readings * int(rc["steps"]), "flops": 0.0, "ops": ops,
            "flops_once": readings * n_record * evaluated, "bytes": max(nbytes, nqf_step, floor) + form_test}


def stage_bytes(cfg: dict, stage: str) -> float:
    """The structure stage's own arrays (nqf.pipeline.resources): per architecture, one after the
    other, the NQF's forms and effective features of every training and test image (float64)."""
    from nqf.experiments.work import form_bytes

    if stage != "structure":
        return 0.0
    side = image_side(cfg)
    n_test = int(cfg["n_test"])
    return max(form_bytes(a, cfg["sizes"][a], n_train_of(cfg, a) + n_test, {"image": side, "n_outputs": 1},
                          features=True) for a in cfg["architectures"])


def _npz_part(path, arrays: dict, n: int, images: int) -> dict:
    """The estimate's part for an .npz read whole (its arrays in their dtypes, and the labels as
    int64), added to the ``images`` bytes of the ``n`` images the run keeps."""
    from pathlib import Path

    from nqf.data.validate_npz import array_bytes
    from nqf.io.write_failures import size_text

    sizes = {k: array_bytes(*arrays[k]) for k in arrays}
    labels = sum(8 * (arrays[k][0][0] if arrays[k][0] else 1) for k in ("y_train", "y_test"))  # as int64
    held = sum(sizes.values()) + labels
    largest = max(sizes, key=sizes.get)
    shape, dtype = arrays[largest]
    file = Path(str(path)).expanduser()
    gib = 2 ** 30
    what = (f"the arrays of {file.name} read whole ({largest} of shape {tuple(shape)}, {np.dtype(dtype).name}: "
            f"{sizes[largest] / gib:.3g} GiB), then {n} images as float64")
    part = {"bytes": held + images, "what": what}
    if held >= images:
        try:
            on_disk = f" (the file is {size_text(file.stat().st_size)} on disk, compressed)"
        except OSError:
            on_disk = ""
        part.update(key="path", refusal=(
            f"{largest} in {file.name} has shape {tuple(shape)} ({np.dtype(dtype).name}) by its header{on_disk}: "
            f"the data job reads the file's arrays whole, {held / gib:.3g} GiB, and with the {n} images "
            f"it keeps needs {(held + images) / gib:.3g} GiB, more than the {{available}} available here (set "
            f"NQF_MAX_MEMORY_GB to change the limit); point path to an .npz with fewer images (this "
            f"experiment uses {n} of them)."))
    return part


def image_side(cfg: dict) -> tuple[int, int]:
    """The images' (rows, columns) as the config's dataset holds them (an .npz's own shape is read
    by estimate where it differs)."""
    return (8, 8) if cfg["dataset"] == "digits8x8" else (28, 28)


def _largest_steps(cfg: dict) -> int:
    return max(int(cfg["steps"][a]) for a in cfg["architectures"])
