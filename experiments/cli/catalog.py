"""What `atnat list` shows: every registered decoder, strategy and task with its whole description
and its options (each field of its options dataclass: type, default and the comment written beside
the field in its source), so that a grid can be written without reading the code."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from atnat.core.engine_names import DEFAULT_ENGINE, ENGINES, INEXACT_OPTIONS, OPTIONS
from atnat.decoding.base import STRATEGIES
from atnat.experiments.console import PipeConsole
from atnat.experiments.data.tasks import TASKS
from atnat.experiments.evaluation.metrics.row import METRICS
from atnat.models.decoders.base import DECODERS


@dataclass(frozen=True)
class Option:
    """One field of an options dataclass, as `atnat list` prints it."""

    name: str
    type: str  # the annotation as written in the source ("tuple[int, int] | None")
    default: str  # repr of the default value; "required" when the field has none
    comment: str  # the comment beside the field in its source ("" when there is none)


def options(cls: type) -> list[Option]:
    """The fields of dataclass `cls` (its bases' included) with their source comments."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass's comment wins over its base's
        if dataclasses.is_dataclass(klass):
            comments.update(field_comments(klass))
    return [Option(f.name, type_name(f.type), default(f), comments.get(f.name, ""))
            for f in dataclasses.fields(cls)]


def type_name(tp) -> str:
    """An annotation as written (a string under `from __future__ import annotations`), else its name."""
    if isinstance(tp, str):
        return tp
    return tp.__name__ if isinstance(tp, type) else str(tp)


def default(f: dataclasses.Field) -> str:
    """The field's default as Python writes it (a factory's product), or "required"."""
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "required"


def field_comments(klass: type) -> dict[str, str]:
    """field name -> the comment on its line, with the comment-only lines right below it that
    continue it; {} when the source cannot be read (a class built at run time)."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        return {}
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == klass.__name__), None)
    if node is None:
        return {}
    comments = {tok.start[0]: (tok.string.lstrip("#").strip(), not tok.line[:tok.start[1]].strip())
                for tok in tokens if tok.type == tokenize.COMMENT}  # line -> (text, nothing else on it)
    out = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        line = stmt.end_lineno
        if line not in comments or comments[line][1]:
            continue
        parts = [comments[line][0]]
        while line + 1 in comments and comments[line + 1][1]:
            line += 1
            parts.append(comments[line][0])
        out[stmt.target.id] = " ".join(parts)
    return out


def description(cls: type, base: type) -> str:
    """The first paragraph of the docstring of `cls`, else of its nearest documented ancestor
    below `base` (the registry's abstract base, whose text describes no entry), as one line."""
    for klass in cls.__mro__:
        if klass is base or not issubclass(klass, base):
            break
        if klass.__dict__.get("__doc__"):
            return " ".join(inspect.cleandoc(klass.__doc__).split("\n\n")[0].split())
    return ""


def option_line(opt: Option) -> Text:
    """`name: type = default  comment`, styled (rich Text, so brackets in comments stay text)."""
    text = Text.assemble((opt.name, "bold"), ": ", (opt.type, "cyan"), " = ", (opt.default, "green"))
    if opt.comment:
        text.append(f"  {opt.comment}", style="dim")
    return text


def entry(name: str, tag: str, cls: type, base: type, options_cls: type) -> Tree:
    """One registered name: its tag (capabilities, needs), description and options."""
    head = Text.assemble((name, "bold magenta"), f"  [{tag}]" if tag else "")
    doc = description(cls, base)
    node = Tree(Text.assemble(head, "  ", doc) if doc else head)
    opts = options(options_cls)
    for opt in opts:
        node.add(option_line(opt))
    if not opts:
        node.add(Text("no options", style="dim"))
    return node


def catalog() -> list[Tree]:
    """A tree per kind: decoders, strategies, tasks, metrics (entry-point plugins included)."""
    import atnat.decoding  # noqa: F401  (registers the strategies)
    import atnat.models.decoders  # noqa: F401  (registers the decoders)

    kinds = (
        ("decoders   (in a config: decoder: {name: NAME, OPTION: VALUE})", DECODERS,
         lambda cls: ", ".join(sorted(cls.capabilities)), lambda cls: cls.Options),
        ("strategies (in a config: eval: {strategies: [{name: NAME, OPTION: VALUE}]})", STRATEGIES,
         lambda cls: f"needs {cls.requires}", lambda cls: cls),
        ("tasks      (in a config: task: {name: NAME, OPTION: VALUE})", TASKS, lambda cls: "", lambda cls: cls.Options),
    )
    trees = []
    for title, reg, tag, options_cls in kinds:
        tree = Tree(Text(title, style="bold underline"))
        for name in reg.names():
            cls = reg.get(name)
            tree.add(entry(name, tag(cls), cls, reg.base, options_cls(cls)))
        for message in reg.plugin_errors.values():  # a broken plugin is shown, not fatal
            tree.add(Text(message, style="red"))
        trees.append(tree)
    trees.append(metrics_tree())
    trees.append(engines_tree())
    return trees


def engines_tree() -> Tree:
    """The decoding engines (--engine of translate, evaluate, bench decode; speed.engine of a grid)
    and their options, with what each applies to."""
    tree = Tree(Text(f"engines    (--engine NAME[+OPTION...]; in a grid: speed: {{engine: NAME}}; default "
                     f"{DEFAULT_ENGINE})", style="bold underline"))
    for name, what in ENGINES.items():
        tree.add(Text.assemble((name, "bold magenta"), "  ", what))
    for option, (engines, what) in OPTIONS.items():
        exact = "" if option not in INEXACT_OPTIONS or "differ" in what else "  (outputs may differ)"
        tree.add(Text.assemble((f"+{option}", "bold cyan"), f"  [{', '.join(engines)}]  ", what, exact))
    return tree


def metrics_tree() -> Tree:
    """The registered metrics of a results row (plugins included), each with the columns it fills."""
    tree = Tree(Text("metrics    (every metric fills its columns of results.csv for every system)",
                     style="bold underline"))
    for name in METRICS.in_order():
        cls = METRICS.get(name)
        node = tree.add(Text.assemble((name, "bold cyan"), "  ", description(cls, METRICS.base)))
        for col in cls.columns:
            better = f", {col.better} is better" if col.better else ""
            node.add(Text.assemble((col.name, "green"), f": {col.kind}{better}  ", (col.description, "dim")))
    for message in METRICS.plugin_errors.values():
        tree.add(Text(message, style="red"))
    return tree


def print_catalog(console: Console | None = None) -> None:
    """Print the catalog (to stdout unless a console is given); plain text when piped."""
    console = console or PipeConsole()
    for tree in catalog():
        console.print(tree)
