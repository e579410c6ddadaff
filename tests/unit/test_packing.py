"""pipeline.models.packing: a fitted object pickled compressed, once, and read back; a model pickled
before packing (an earlier run's tasks/, resumed) still loads."""

import pickle

from pipeline.models.base import TabularModel
from pipeline.models.lightgbm import LightGBMModel
from pipeline.models.packing import Packed, packed_state, unpacked_state


class Holder:
    pass


def test_a_packed_object_reads_back_equal_and_smaller():
    obj = {"left": list(range(50_000)), "right": [0] * 50_000}
    packed = Packed.of(obj)
    assert len(pickle.dumps(packed)) < len(pickle.dumps(obj)) / 2
    assert pickle.loads(pickle.dumps(packed)).unpack() == obj


def test_the_packing_is_kept_beside_its_object_and_made_anew_for_another():
    holder, first = Holder(), [1, 2, 3]
    holder.__dict__.update(model_=first, name="x")
    state = packed_state(holder, holder.__dict__, "model_")
    assert isinstance(state["model_"], Packed) and "_packed_" not in state and state["name"] == "x"
    again = packed_state(holder, holder.__dict__, "model_")
    assert again["model_"] is state["model_"]  # not compressed a second time
    holder.model_ = [4]
    assert packed_state(holder, holder.__dict__, "model_")["model_"] is not state["model_"]
    read = unpacked_state(state, "model_")
    assert read["model_"] == first and read["_packed_"][1] is state["model_"]


def test_a_model_pickled_before_packing_loads_and_an_unpacked_kind_stays_plain():
    assert not LightGBMModel.profile.packed and not TabularModel.profile.packed
    model = LightGBMModel({}, "lgb")
    model.model_ = {"trees": [1, 2]}
    state = pickle.loads(pickle.dumps(model)).__dict__
    assert state["model_"] == {"trees": [1, 2]} and "_packed_" not in state


def test_a_forest_pickled_before_its_kind_was_packed_still_loads():
    """An earlier run's tasks/ (resume) holds forests pickled as they were: read back as they are."""
    from pipeline.models.extra_trees import ExtraTreesModel

    assert ExtraTreesModel.profile.packed == "model_"
    old = ExtraTreesModel.__new__(ExtraTreesModel)
    old.__setstate__({"params": {}, "name": "et", "model_": {"trees": [1, 2]}})
    assert old.model_ == {"trees": [1, 2]} and isinstance(pickle.dumps(old), bytes)
    assert pickle.loads(pickle.dumps(old)).model_ == {"trees": [1, 2]}  # saved packed from then on
