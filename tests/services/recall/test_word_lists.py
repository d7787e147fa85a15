"""The word lists recall decides with are data (data/recall/), and their hash goes with what they decided."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from services.recall import candidates
from services.recall.candidates import CandidateRule, content_words
from services.recall.parameters import resolve_recall_params
from services.recall.word_lists import WORD_LIST_DIR, WORD_LIST_NAMES, lists_hash, load_word_lists, word_list_hashes
from services.study.definition import load_study

RECALL_PACKAGE = Path(candidates.__file__).resolve().parent


def test_each_word_list_loads_and_its_hash_changes_with_a_word_not_with_its_prose():
    for name in WORD_LIST_NAMES:
        lists = load_word_lists(name)
        raw = json.loads((WORD_LIST_DIR / f"{name}.json").read_text(encoding="utf-8"))
        assert lists.sha256 == lists_hash(raw)
        assert lists_hash({**raw, "about": raw.get("about", "") + " (reworded)"}) == lists.sha256
    words = load_word_lists("candidate_words").data
    english = [w for w in words["conversational_words"]["en"] if w != "thanks"]
    fewer = {**words, "conversational_words": {**words["conversational_words"], "en": english}}
    assert lists_hash(fewer) != load_word_lists("candidate_words").sha256


def test_the_rule_decides_with_the_file_and_records_its_hash_in_the_recall_parameters():
    words = load_word_lists("candidate_words").data["conversational_words"]
    assert "thanks" in words["en"] and "谢谢" in words["zh"]
    assert content_words("OK thanks!") == [] and content_words("好的，谢谢") == []
    params = resolve_recall_params(load_study().memory.recall_config)
    assert params.candidates.word_lists == load_word_lists("candidate_words").sha256 == CandidateRule().word_lists
    assert params.to_dict()["candidates"]["word_lists"] == word_list_hashes()["candidate_words"]


def test_no_word_list_is_python_under_services_recall():
    """Sets and lists of words, lexicons (word -> weight) and regular expressions alternating words live in
    data/recall; Python under services/recall holds none (identifiers such as configuration keys are not words)."""
    for path in sorted(RECALL_PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Set, ast.List)):
                words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                assert len(words) < 8, f"{path.name}:{node.lineno} holds a word list"
            if isinstance(node, ast.Dict):
                weights = [v for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, float)]
                assert len(weights) < 8, f"{path.name}:{node.lineno} holds a lexicon"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and not _is_docstring(tree, node):
                assert node.value.count("|") < 4, f"{path.name}:{node.lineno} alternates words in a regular expression"
                prose = re.search(r"[.:;。：；]", node.value)  # a prompt is sentences, a word list is not
                assert prose or len(node.value.split()) < 20, f"{path.name}:{node.lineno} holds words in a string"


def _is_docstring(tree: ast.AST, constant: ast.Constant) -> bool:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and body[0].value is constant:
            return True
    return False
