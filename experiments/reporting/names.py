"""Systems named the way a paper names them ("CTC+GLAT, distilled, one pass"), built from a results row's
decoder, options, training data and strategy; a plugin's decoder or strategy is named by its registered name
or label. The report's verdict, headline table and figure use these names."""
from __future__ import annotations

import json
import re

import pandas as pd

from atnat.experiments.evaluation.baseline import is_at_rows, is_engine_twin

DECODER_NAMES = {"at": "AT", "nat": "NAT", "cmlm": "CMLM", "ctc": "CTC", "dag": "DA-Transformer"}
GLANCING = ("nat", "ctc")  # decoders whose glancing is an option (DA-Transformer glances by default)


def _settings(row: pd.Series) -> dict:
    try:
        return json.loads(row.get("strategy_settings") or "{}")
    except (TypeError, ValueError):
        return {}


def strategy_name(row: pd.Series) -> str:
    """A strategy as a paper says it: greedy, beam 5, one pass, mask-predict 10, NPD over 5 lengths ..."""
    s, name = _settings(row), str(row.get("strategy_name") or row["strategy"])
    label = str(row["strategy"])
    for key, pattern in (("beam_size", r"beam(\d+)"), ("iterations", r"mask-predict-(\d+)"), ("length_beam", r"-lb(\d+)"),
                         ("length_beam", r"npd-(\d+)"), ("block", r"speculative-k(\d+)")):
        found = re.search(pattern, label)
        if found and key not in s:  # a results.csv without strategy settings: the label says it
            s[key] = int(found.group(1))
    if name == "greedy":
        return "greedy"
    if name == "beam":
        return f"beam {s.get('beam_size', '?')}"
    if name in ("parallel", "length-beam"):
        lengths = int(s.get("length_beam", 1) or 1)
        return "one pass" + (", fixed length" if s.get("length") == "fixed" else "") + (
            f" over {lengths} lengths" if lengths > 1 else "")
    if name == "mask-predict":
        return f"mask-predict {s.get('iterations', '?')}" + (", early stop" if s.get("early_stop") else "")
    if name == "npd":
        return f"NPD over {s.get('length_beam', '?')} lengths"
    if name == "ctc":
        return "one pass" if int(s.get("beam_size", 1) or 1) == 1 else f"prefix beam {s['beam_size']}"
    if name.startswith("dag-"):
        return {"dag-lookahead": "lookahead", "dag-greedy": "greedy path", "dag-viterbi": "joint Viterbi"}.get(name, name)
    if name == "speculative":
        return f"speculative, block {s.get('block', '?')}"
    return label


def lossy_mark(row: pd.Series) -> str:
    """' (not lossless: ...)' after a speculative system whose output was not its AT verifier's greedy
    output in every test sentence (verifier_greedy_match below 1; with several seeds, their mean); ''
    for every other system."""
    match = row.get("verifier_greedy_match")
    if match is None or pd.isna(match) or float(match) >= 1.0:
        return ""
    return f" (not lossless: its output equals AT greedy's in {100 * float(match):.1f}% of test sentences)"


def system_name(row: pd.Series, split_shown: bool = False) -> str:
    """A system in plain words: the decoder (its glancing, its layer split where `split_shown`), how it was
    trained (distilled / on the references, for a NAT), and how it decodes."""
    decoder = str(row["decoder"])
    options = str(row.get("options") or "")
    strategy = strategy_name(row)
    split = f" {row['layers']}" if split_shown and pd.notna(row.get("layers")) and str(row["layers"]) else ""
    if is_engine_twin(pd.DataFrame([row])).iloc[0]:
        plain = strategy.removesuffix("-ct2")
        beam = re.match(r"beam(\d+)", plain)
        label = str(row["strategy"])
        nearest = re.match(r"beam\d+", label) is not None and not ("length_norm=length" in label
                                                                  and "stopping=fairseq" in label)  # its own penalty
        return (f"CTranslate2 AT{split} {f'beam {beam.group(1)}' if beam else plain}"
                + (" (its nearest search: |Y|^alpha length penalty)" if nearest else ""))
    name = DECODER_NAMES.get(decoder, decoder)
    if decoder in GLANCING and "glat=True" in options:
        name += "+GLAT"
    if bool(is_at_rows(pd.DataFrame([row])).iloc[0]):
        return f"{name}{split} {strategy}"
    if str(row.get("strategy_name")) == "speculative":
        return f"{name} drafts, AT verifies: {strategy}{lossy_mark(row)}"
    trained = "distilled" if bool(row.get("distilled")) else "on the references"
    return f"{name}, {trained}, {strategy}"


def training_setting(row: pd.Series) -> str:
    """The training settings a results row records that a paper names a system by ("guided attention",
    "scheduled sampling"); '' where it records none of them."""
    options = str(row.get("options") or "")
    said = ["guided attention"] if bool(row.get("guided_attention")) and not pd.isna(row.get("guided_attention")) else []
    said += [words for key, words in (("scheduled_sampling=", "scheduled sampling"), ("input_noise=", "input noise"))
             if key in options]
    return ", ".join(said)


def plain_names(agg: pd.DataFrame) -> dict[str, str]:
    """`family / strategy` -> its plain name within one task: layer splits shown where the task's ATs differ
    in them; a name two systems would share followed by the training setting that differs ("guided attention"),
    else by the cell it comes from, e.g. "(at-fp32)"."""
    ours = agg[~is_engine_twin(agg)] if len(agg) else agg  # a twin's layers are its system's (often not recorded)
    layers = ours["layers"].dropna().astype(str) if "layers" in ours else pd.Series(dtype=str)
    splits = layers[layers != ""].nunique() > 1
    first = {r["system"]: system_name(r, splits) for _, r in agg.iterrows()}
    taken = pd.Series(list(first.values())).value_counts()
    told = {r["system"]: first[r["system"]] + (f", {q}" if (q := training_setting(r)) else "") if taken[first[r["system"]]] > 1
            else first[r["system"]] for _, r in agg.iterrows()}  # a name several share: the setting that differs
    still = pd.Series(list(told.values())).value_counts()
    out = {}
    for _, r in agg.iterrows():
        name = told[r["system"]]
        if still[name] > 1:  # no recorded setting tells them apart: the cell they come from
            variant = r.get("variant") if isinstance(r.get("variant"), str) and r.get("variant") else r["family"]
            name += f" ({variant})"
        out[r["system"]] = name
    clash = pd.Series(list(out.values())).value_counts()
    for _, r in agg.iterrows():  # the cells share a variant (e.g. no cells: key): their families tell them apart
        if clash[out[r["system"]]] > 1:
            out[r["system"]] = f"{first[r['system']]} ({r['family']})"
    return out
