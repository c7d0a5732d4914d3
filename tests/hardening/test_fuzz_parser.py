"""Fuzzing the text IR parser (issue #12, item 2): random and mutated text never escapes as
anything but a :class:`~gruc.errors.GrucParseError`, and whatever parses is canonical after one
print (``print(parse(print(m))) == print(m)``), through JSON too, and verifies or fails with a
:class:`~gruc.errors.GrucError`.

Why mutations of valid IR and not only random bytes: random text dies at the header; a valid module
with one token dropped, a number pushed past a limit or a line truncated reaches every statement
rule, the graph API behind it (shapes, mappings, view arguments, vertex checks) and the program
constructors.  Seeds are the golden IR files of ``tests/ir/golden`` and ``tests/passes/*/``, the
example of ``docs/ir.md`` and a small AUGRU training layer (functions, loops, dynamic slices,
matmul vertices, constants of three types).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from gruc.errors import GrucError, GrucParseError
from gruc.ir.module import Module
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.serialize import module_from_json, module_to_json
from gruc.ir.verify import verify
from gruc.tools.gru_layer import GruLayerConfig, build_layer
from hardening_fuzz import fuzz_settings

ROOT = Path(__file__).resolve().parents[2]
SEPARATOR = "# ----- expected\n"


def _golden_modules() -> list[str]:
    """Every module text of the golden files (a pass golden holds an input and an expected one)."""
    texts = []
    for path in sorted([*ROOT.glob("tests/ir/golden/*.gruc"), *ROOT.glob("tests/passes/*/*.gruc")]):
        for part in path.read_text().split(SEPARATOR):  # the header comments come before `module`
            texts.append("module target(" + part.split("module target(", 1)[1])
    return texts


def _doc_example() -> str:
    doc = (ROOT / "docs" / "ir.md").read_text()
    return "module target(" + doc.split("```\nmodule target(", 1)[1].split("```\n", 1)[0]


def _gru_module() -> str:
    config = GruLayerConfig(sequence_size=2, input_size=3, output_size=2, batch_size=2,
                            tiles_per_ipu=4, phase="bwd", with_attention=True, reset_after=True)
    layer = build_layer(config)
    return print_module(Module(layer.graph, layer.programs))


SEEDS = [*_golden_modules(), _doc_example(), _gru_module()]
_PIECE = re.compile(r'"(?:[^"\\\n]|\\.)*"|[%@]?[A-Za-z0-9_.]+|->|\S')
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?")
ODD_NUMBERS = ["0", "-0", "-1", "1", "2", "7", "-7", "65504", "65505", "2147483648", "-2147483649",
               "4294967296", str(2 ** 63), str(-2 ** 63 - 1), "1" * 25, "1e309", "-1e309",
               "1e-46", "0.5", "-0.0", "nan", "inf", "-inf", "1.5e38", "3.5e38"]
ODD_CHARS = list("%@{}()[],:;=~/x_-.#\"\\\n\t 0123456789abcdeé$\x00")
VOCABULARY = ["module", "target", "(", ")", "=", "name", '"custom"', "tiles_per_ipu", "4", ",",
              "%x", "%y", "var", "const", "f32", "i32", "bool", "f16", "u32", "[", "]", '"x"',
              "map", "0:4", "x", "~", "/", "8", "_", "values", "1.0", "true", "slice", "reshape",
              "shape", "broadcast", "times", "dim", "concat", "shuffle", "perm", "reverse",
              "subsample", "stride", ":", "host_write", "host_read", "cs", "@s", "@f", "{", "}",
              "Map", "MapInPlace", "out", "ins", "inout", "expr", "add(_1, _2)", "tanh(_1)",
              "tile", "func", "program", "0", "1", "repeat", "execute", "copy", "->", "if",
              "else", "while", "call", "sync", "print", "write_undef", "#", "\n"]
HEADER = 'module target(name="custom", tiles_per_ipu=4)\n'


LINE_EDITS = {  # (lines, i, j) with i <= j -> edited lines
    "delete_line": lambda lines, i, j: lines[:i] + lines[i + 1:],
    "duplicate_line": lambda lines, i, j: lines[:i + 1] + lines[i:],
    "swap_lines": lambda lines, i, j: (lines[:i] + lines[j:j + 1] + lines[i + 1:j] + lines[i:i + 1]
                                       + lines[j + 1:]) if i < j else lines}


def _mutate_once(text: str, data) -> str:
    """One random edit of ``text``: at the byte, token, line or number level, or a truncation."""
    action = data.draw(st.sampled_from(["flip", "delete_token", "duplicate_token", "swap_tokens",
                                        "replace_token", "repeat_token", "truncate", "number",
                                        "delete_line", "duplicate_line", "swap_lines"]),
                       label="action")
    if not text:
        return data.draw(st.sampled_from(VOCABULARY))
    if action == "flip":
        at = data.draw(st.integers(0, len(text) - 1))
        return text[:at] + data.draw(st.sampled_from(ODD_CHARS)) + text[at + 1:]
    if action == "truncate":
        return text[:data.draw(st.integers(0, len(text) - 1))]
    if action == "number":
        numbers = list(_NUMBER.finditer(text))
        if not numbers:
            return text
        m = data.draw(st.sampled_from(numbers))
        value = data.draw(st.sampled_from(ODD_NUMBERS) | st.integers(-3, 40).map(str))
        return text[:m.start()] + value + text[m.end():]
    if action in LINE_EDITS:
        lines = text.split("\n")
        i, j = sorted(data.draw(st.integers(0, len(lines) - 1)) for _ in range(2))
        return "\n".join(LINE_EDITS[action](lines, i, j))
    pieces = list(_PIECE.finditer(text))
    if not pieces:
        return text
    i, j = (data.draw(st.integers(0, len(pieces) - 1)) for _ in range(2))
    a, b = pieces[min(i, j)], pieces[max(i, j)]
    if action == "delete_token":
        return text[:a.start()] + text[a.end():]
    if action == "duplicate_token":
        return text[:a.end()] + " " + a.group() + text[a.end():]
    if action == "repeat_token":  # deep nesting: '(' or '{' or 'neg(' hundreds of times
        return text[:a.start()] + a.group() * data.draw(st.integers(2, 1200)) + text[a.start():]
    if action == "replace_token":
        return text[:a.start()] + b.group() + text[a.end():]
    return (text[:a.start()] + b.group() + text[a.end():b.start()] + a.group()  # swap
            + text[b.end():])


def check_parses_or_fails_cleanly(text: str) -> bool:
    """The fuzz property; returns whether ``text`` parsed (for the statistics)."""
    try:
        module = parse_module(text)
    except GrucParseError as error:
        message = str(error)
        line = int(re.match(r"line (\d+), column \d+: ", message).group(1))
        assert 1 <= line <= text.count("\n") + 1, message
        return False
    printed = print_module(module)
    again = parse_module(printed)
    assert print_module(again) == printed
    loaded = module_from_json(json.loads(json.dumps(module_to_json(again), allow_nan=False)))
    assert print_module(loaded) == printed
    try:
        verify(module)
    except GrucError:
        pass
    return True


@fuzz_settings(ci=250)
@given(st.sampled_from(SEEDS), st.integers(1, 4), st.data())
def test_mutated_ir_parses_canonically_or_raises_a_parse_error(seed, edits, data):
    text = seed
    for _ in range(edits):
        text = _mutate_once(text, data)
    parsed = check_parses_or_fails_cleanly(text)
    event("parsed" if parsed else "rejected")


@fuzz_settings(ci=150)
@given(st.booleans(), st.lists(st.sampled_from(VOCABULARY), max_size=40),
       st.text(alphabet=st.sampled_from(ODD_CHARS), max_size=30))
def test_random_token_soup_and_text_never_escape_as_other_errors(with_header, tokens, noise):
    text = (HEADER if with_header else "") + " ".join(tokens) + noise
    check_parses_or_fails_cleanly(text)


ODD_VALUES = [None, True, -1, 0, 3, 2 ** 31, 2 ** 70, -2 ** 70, 1.5, "", "%x", "@s", "f32", "nan",
              [], {}, [0, 0], {"tuple": []}, {"float": "inf"}, {"expr": {"op": "nope"}}]


def _json_paths(document):
    """Every (path, value) of a JSON document, containers first (in document order).  Walked
    with a stack of its own: after a few edits a value may be buried over a thousand levels
    deep, and a recursive walk would then fail or not depending on how deep the caller's stack
    already is — which differs between hypothesis generating an example and replaying it."""
    stack = [((), document)]
    while stack:
        path, node = stack.pop()
        yield path, node
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        stack.extend(reversed([(path + (key,), child) for key, child in items]))


def _json_copy(value):
    """A deep copy of a JSON value, however deeply buried (a stack of its own, as above)."""
    root = [None]
    stack = [(value, root, 0)]
    while stack:
        node, into, at = stack.pop()
        if isinstance(node, dict):
            into[at] = {}
            stack.extend((child, into[at], key) for key, child in node.items())
        elif isinstance(node, list):
            into[at] = [None] * len(node)
            stack.extend((child, into[at], k) for k, child in enumerate(node))
        else:
            into[at] = node
    return root[0]


def _mutate_json(document, data):
    """One random edit of a module's JSON data: drop a key, swap in an odd value, duplicate or
    drop a list item, or bury a value hundreds of lists deep."""
    paths = [path for path, _ in _json_paths(document) if path]
    path = data.draw(st.sampled_from(paths))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    action = data.draw(st.sampled_from(["delete", "replace", "duplicate", "bury"]))
    if action == "delete":
        del parent[key]
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(key, _json_copy(parent[key]))
    elif action == "bury":
        value = parent[key]
        for _ in range(data.draw(st.integers(1, 600))):
            value = data.draw(st.sampled_from([[value], {"tuple": [value]},
                                               {"op": "neg", "args": [value]}]))
        parent[key] = value
    else:
        parent[key] = _json_copy(data.draw(st.sampled_from(ODD_VALUES)))
    return document


JSON_SEEDS = [json.dumps(module_to_json(parse_module(text))) for text in SEEDS]


@fuzz_settings(ci=150)
@given(st.sampled_from(JSON_SEEDS), st.integers(1, 3), st.data())
def test_mutated_json_loads_canonically_or_raises_a_parse_error(seed, edits, data):
    document = json.loads(seed)
    for _ in range(edits):
        document = _mutate_json(document, data)
    try:
        module = module_from_json(document)
    except GrucParseError:
        event("rejected")
        return
    event("loaded")
    printed = print_module(module)
    assert print_module(parse_module(printed)) == printed


def test_what_the_fuzzers_found_is_a_parse_error():
    """The fuzzers' findings, minimised: each escaped as a MemoryError or RecursionError before."""
    head = HEADER + '%x = var f32[2] "x" map=[0 x 2]\n'
    texts = {
        "a view may hold at most": head + "%y = broadcast %x times=1000000000000 dim=0 : "
                                          "f32[2000000000000]\nprogram 0 write_undef %y\n",
        "levels of nested tuples and lists": head + "cs @c {\n  Map(out=%x, ins=[%x]) expr=_1 p="
                                                    + "(" * 3000 + ")" * 3000 + "\n}\n"}
    for message, text in texts.items():
        try:
            parse_module(text)
        except GrucParseError as error:
            assert message in str(error)
        else:
            raise AssertionError(f"accepted: {text[:80]!r}")
    document = module_to_json(parse_module(SEEDS[0]))
    params = next(cs for cs in document["compute_sets"] if cs["vertices"])["vertices"][0]["params"]
    expression, nested = params["expr"]["expr"], []
    for _ in range(3000):
        expression, nested = {"op": "neg", "args": [expression]}, [nested]
    for key, deep, message in (("expr", {"expr": expression}, "levels of nesting"),
                               ("extra", nested, "nest more than 200 levels")):
        original = params.get(key)
        params[key] = deep
        try:
            module_from_json(document)
        except GrucParseError as error:
            assert message in str(error), error
        else:
            raise AssertionError(f"deep {key} accepted")
        params.pop(key)
        if original is not None:
            params[key] = original
    edits = {"a view argument of the wrong type": ("views", 0, "args", "begin"),
             "a 70-bit mapping value": ("variables", 0, "map", 0, 1),
             "a 70-bit target field": ("target", "bytes_per_tile")}
    for what, path in edits.items():
        edited = json.loads(JSON_SEEDS[0])
        parent = edited
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = 1 if what.startswith("a view") else 2 ** 70
        try:
            module_from_json(edited)
        except GrucParseError:
            continue
        raise AssertionError(f"{what} was accepted")


def test_every_seed_is_canonical():
    """The seeds themselves round-trip, so a mutation is the only reason a text fails."""
    assert len(SEEDS) >= 10
    for text in SEEDS:
        assert check_parses_or_fails_cleanly(text)
        assert print_module(parse_module(text)) == text


def test_the_property_fails_on_a_non_parse_error(monkeypatch):
    """The property is not vacuous: an exception other than GrucParseError gets through."""
    import gruc.ir.parser as parser

    def broken(self):
        raise KeyError("boom")

    monkeypatch.setattr(parser._Parser, "module", broken)
    try:
        check_parses_or_fails_cleanly(SEEDS[0])
    except KeyError:
        return
    raise AssertionError("a KeyError from the parser was swallowed")
