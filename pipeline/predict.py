"""`python -m pipeline.predict source=… [data=…] [output=…]`: score a data source with a trained model.

The source is a run directory, an MLflow run id or a models:/ URI; the input any `data` source the
engine trains on, validated against the training schema and streamed in chunks; the output a CSV
or Parquet file with the row id, the predicted label (or value) and, for classifiers, one
probability column per class. `+hardware=1gpu` predicts on a GPU.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the schemas in Hydra's ConfigStore)
from pipeline.__main__ import CONFIG_DIR, refuse_former_keys

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.schema import Tally

log = logging.getLogger("pipeline")


def main():
    """`python -m pipeline.predict [overrides]`: checked for keys that once named a component, composed, run;
    what it writes closed to group and other writes, whatever the umask."""
    from pipeline.run_folder import close_umask

    close_umask()
    refuse_former_keys(sys.argv[1:])
    return _composed_main()


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="predict")
def _composed_main(cfg: DictConfig):
    from pipeline.errors import PipelineError

    try:
        return run(cfg)
    except PipelineError as exc:
        from pipeline.report import exit_with_error

        exit_with_error(exc)


def run(cfg: DictConfig) -> int:
    from hydra.core.hydra_config import HydraConfig

    from pipeline.settings import read_predict_settings

    settings = read_predict_settings(cfg)
    return predict(settings, Path(HydraConfig.get().runtime.cwd))


def predict(settings, base_dir: Path) -> int:
    """Score settings.data with the model settings.source names into settings.output; returns the number of rows."""
    from pipeline.chunks import ChunkWriter
    from pipeline.data import local_path
    from pipeline.table_files import check_file
    from pipeline.accelerators import local_ordinals, torch_device
    from pipeline.predictor_source import load_predictor
    from pipeline.report import console
    from pipeline.schema import Tally

    hardware = resolve_hardware(settings.hardware)
    on_gpu = hardware.num_gpus > 0 and hardware.devices
    device = torch_device(local_ordinals(hardware.devices[:1], sees_only_its_devices=False)) if on_gpu else "cpu"
    data_source = settings.data.make_source()  # once: the checks and the reads below use it
    path = local_path(settings.data, base_dir, data_source)
    if path is not None:
        check_file(path)  # a missing or empty file fails before the model is loaded
    predictor = load_predictor(settings.source, settings.predictor, settings.tracking.uri, base_dir)
    chunks = input_chunks(settings, base_dir, predictor.schema, path, data_source)
    predictor.place(device, hardware.num_cpus)
    output = Path(settings.output).expanduser()
    output = output if output.is_absolute() else base_dir / output
    output.parent.mkdir(parents=True, exist_ok=True)
    writer, tally, start = ChunkWriter(output), Tally(), time.perf_counter()
    try:
        for chunk in chunks:
            writer.write(predictions(predictor, chunk, settings, writer.rows, tally))
        if writer.rows == 0:
            raise _no_rows(settings)
        writer.close()
    except BaseException:
        writer.discard()
        raise
    seconds = time.perf_counter() - start
    tally.say(f"data.path={settings.data.path!r}")
    console.print(f"{writer.rows:,} rows scored by {predictor.name} on {device} in {seconds:.1f} s "
                  f"({writer.rows / max(seconds, 1e-9):,.0f} rows/s): {output}")
    return writer.rows


def resolve_hardware(declared):
    """The hardware group as in training (declared or detected); a declared box this machine is not
    is an error before any work (there is no plan-only mode here)."""
    from pipeline import hardware as hw
    from pipeline.errors import HardwareError

    try:
        return hw.resolve(declared, hw.detect(), dry_run=False)
    except HardwareError as exc:
        reason = str(exc).split(". To plan for that box", 1)[0]
        raise HardwareError(f"{reason}; batch prediction runs on this machine: pick a profile it has, or drop "
                            "+hardware to use what it detects") from None


def input_chunks(settings, base_dir: Path, schema, path, data_source) -> Iterator[pd.DataFrame]:
    """The input in chunks of settings.chunk_rows, its columns checked against the training schema
    first: streamed from a local file (`path`), else read whole from `data_source`."""
    from pipeline import chunks as io
    from pipeline.data import read_table

    wanted = [settings.id_column] if settings.id_column else []
    if path is None:
        frame = read_table(settings.data, base_dir, data_source)
        _check_columns(schema, list(frame.columns), settings)
        yield from io.frame_chunks(frame, settings.chunk_rows)
        return
    kind = data_source.kind
    _check_columns(schema, io.columns_of(path, kind), settings)
    columns = list(dict.fromkeys([*wanted, *schema.input_columns]))
    yield from io.read_chunks(path, kind, columns, schema.input_text, schema.input_numeric,
                              settings.chunk_rows)


def _check_columns(schema, columns: list[str], settings) -> None:
    from pipeline.errors import DataError

    source = f"data.path={settings.data.path!r}"
    schema.check_columns(columns, source)
    if settings.id_column and settings.id_column not in columns:
        raise DataError(f"id_column={settings.id_column!r} is not a column of {source}")


def predictions(predictor, chunk: pd.DataFrame, settings, offset: int, tally: Tally) -> pd.DataFrame:
    """The output rows of one chunk: id, predicted label (or value), class probabilities."""
    import numpy as np
    import pandas as pd

    schema = predictor.schema
    X = schema.apply(chunk, f"data.path={settings.data.path!r}", tally)
    proba = predictor.predict_typed(X)
    ids = chunk[settings.id_column].to_numpy() if settings.id_column else np.arange(offset, offset + len(chunk))
    label = schema.label or "prediction"
    out = {settings.id_column or "row_id": ids}
    if predictor.problem_type == "regression":
        out[label] = proba
    else:
        from pipeline.ensemble import labels

        out[label] = labels(predictor, proba)
        for k, cls in enumerate(predictor.classes):
            out[f"proba_{cls}"] = proba[:, k]
    return pd.DataFrame(out)


def _no_rows(settings):
    from pipeline.errors import DataError

    return DataError(f"data.path={settings.data.path!r} has a header but no rows: nothing to predict")


if __name__ == "__main__":
    main()
