"""The structure figures (bench/structure.py) on a small package whose walk is known by hand: rooms, moves,
a cycle back up the call stack, a re-entry into the root's module, returns, continuation lines."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from bench.structure import main, walk

FILES = {
    "pkg/__init__.py": "",
    "pkg/sub/__init__.py": "from pkg.sub.deep import down as reexported\n",
    "pkg/root.py": """
        from pkg import helpers
        from pkg.sub import reexported
        from pkg.sub.deep import Deep


        def start(cfg):
            helpers.first(cfg)
            Deep(cfg)
            reexported(cfg)
            cfg.method_of_a_value()  # not resolvable: not followed
            return back(cfg)


        def back(cfg):
            return cfg
        """,
    "pkg/helpers.py": """
        def first(cfg):
            from .sub import deep
            return deep.down(cfg)


        def unused():
            return 1
        """,
    "pkg/sub/deep.py": """
        from ..helpers import first


        def down(cfg):
            from pkg.root import back
            return back(cfg), first(cfg)


        class Base:
            def __post_init__(self):
                self.go()


        class Deep(Base):
            def __init__(self, cfg):
                self.cfg = cfg
                super().__post_init__()

            def go(self):
                text = "a string that ends in a backslash \\\\"
                return text if self.cfg else \\
                    down(self.cfg)  # the line above is a continuation; this comment's \\
        """,
}


def _package(root: Path) -> Path:
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_the_figures_of_a_known_walk(tmp_path):
    figures = walk(_package(tmp_path), "pkg/root.py:start:cfg")
    moves = [(m["from"], m["to"], m["climb_back_up"], m["root_reentry"]) for m in figures["move_list"]]
    assert moves == [
        ("pkg.root:start", "pkg.helpers:first", False, False),
        ("pkg.helpers:first", "pkg.sub.deep:down", False, False),
        # down -> back: into the root's module, which is on the stack (start): a climb and a re-entry
        ("pkg.sub.deep:down", "pkg.root:back", True, True),
        # down -> first: helpers is on the stack above down (first called down): a cycle back up
        ("pkg.sub.deep:down", "pkg.helpers:first", True, False),
        # a class is walked through __init__ and an inherited __post_init__; self.go and super() resolve
        ("pkg.root:start", "pkg.sub.deep:Deep", False, False),
        # a name re-exported by a package's __init__ is followed to its definition (walked already)
        ("pkg.root:start", "pkg.sub.deep:down", False, False),
    ]
    assert figures["room_list"] == ["pkg.helpers", "pkg.root", "pkg.sub.deep"]
    counts = figures["rooms"], figures["moves"], figures["climbs_back_up"], figures["root_reentries"]
    assert counts == (3, 6, 2, 1)
    # walked once each: start, first, down, back, Deep, Base.__post_init__ (super()), Deep.go (self.go in the
    # inherited __post_init__); helpers.unused never
    assert figures["functions_visited"] == 7
    # returns: first->start, down->first, back->down, Deep->start; two of them into the root's module
    assert (figures["returns"], figures["root_returns"]) == (4, 2)
    assert figures["continuations"] == {"pkg/sub/deep.py": [22]}


def test_the_command_line_prints_json(tmp_path, capsys):
    assert main(["pkg/root.py:start:cfg", "--root", str(_package(tmp_path)), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["rooms"] == 3 and figures["argument"] == "cfg"


def test_the_engine_root_can_be_walked():
    root = Path(__file__).resolve().parents[2]
    figures = walk(root, "pipeline/run.py:run:cfg")
    assert "pipeline.run" in figures["room_list"] and figures["rooms"] > 10
    assert figures["moves"] > figures["rooms"]
