"""Extract math-verify's test expectations (gold, prediction, expected verdict, options) as data.

Usage: ``python scripts/extract_math_verify_cases.py GIT_DIR > src/veriloop/verifiers/data/math_verify_cases.jsonl``
where GIT_DIR is a clone of https://github.com/huggingface/Math-Verify (Apache-2.0).  Only the
literal test parameters are read (``ast.literal_eval`` on each ``pytest.mark.parametrize`` list);
no code is copied.  Each row also records math-verify's own verdict at the test's options and at
its default options (latex + expr extraction, ``float_rounding=6``, strict, no set-relation
comparison), so a case whose expectation depends on a non-default option can be told apart
mechanically: it is one where the two verdicts differ.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys

COMMIT = "5d148cfaaf99214c2e4ffb4bc497ab042c592a7a"
# Six percent cases added with the 0.9.0 release (math-verify 0.9.0 passes them), read from
# tests/test_all.py as stored at Math-Verify commit cf14bc47e798017458fa7f60138da640065351ce;
# that file is the file at COMMIT plus these rows and a post-0.9.0 test (trailing punctuation).
PERCENT_0_9_0 = [
    ("$28\\%$", "28", 1),
    ("$0.28$", "28", 0),
    ("$28/100$", "28", 0),
    ("$28$", "28/100", 0),
    ("$\\frac{28}{100}$", "28", 0),
    ("$28*\\frac{1}{100}$", "28", 0),
]
PERCENT_COMMIT = "cf14bc47e798017458fa7f60138da640065351ce"
FILES = [
    "tests/test_all.py",
    "tests/test_boxed.py",
    "tests/test_numina_cases.py",
    "tests/test_open_thoughts.py",
    "tests/test_strict.py",
    "tests/test_yujianll.py",
]


def _value(node):
    try:
        return ast.literal_eval(node)
    except ValueError:  # f"{math.sqrt(17):.15f}": a formatted constant, evaluated with math only
        return eval(compile(ast.Expression(node), "<case>", "eval"), {"__builtins__": {}, "math": math})  # noqa: S307


def _options(fn: ast.FunctionDef) -> dict:
    """The options the test body passes to its comparison (compare_strings keywords, or parse defaults)."""
    opts = {
        "match_types": ["latex", "expr"],
        "precision": 6,
        "strict": True,
        "allow_set_relation_comp": False,
        "harness": "compare_strings",
    }
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "compare_strings":
            for kw in node.keywords:
                if isinstance(kw.value, ast.Constant) or isinstance(kw.value, ast.List):
                    opts[kw.arg] = ast.literal_eval(kw.value)
                else:  # taken from the case's own parameter of that name
                    opts[kw.arg] = f"<param:{kw.value.id}>"
            return opts
    opts["harness"] = "parse_default_config"  # verify(parse(gold), parse(pred))
    return opts


def cases(git_dir: str):
    for path in FILES:
        src = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True
        ).stdout
        for fn in ast.parse(src).body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test")):
                continue
            for dec in fn.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                    continue
                names = [n.strip() for n in ast.literal_eval(dec.args[0]).split(",")]
                base = _options(fn)
                for k, elt in enumerate(dec.args[1].elts):
                    row = dict(zip(names, (_value(e) for e in elt.elts), strict=True))
                    opts = {
                        key: (row[v[7:-1]] if isinstance(v, str) and v.startswith("<param:") else v)
                        for key, v in base.items()
                    }
                    expected = row.get("expected", row.get("result"))
                    yield {
                        "id": f"{path.split('/')[1]}::{fn.name}[{k}]",
                        "gold": row["gold"],
                        "pred": row["pred"],
                        "expected": int(expected),
                        **opts,
                        "commit": COMMIT,
                    }
    for k, (gold, pred, expected) in enumerate(PERCENT_0_9_0):
        yield {
            "id": f"test_all.py::test_percent_notation[0.9.0+{k}]",
            "gold": gold,
            "pred": pred,
            "expected": expected,
            "match_types": ["latex", "expr"],
            "precision": 6,
            "strict": True,
            "allow_set_relation_comp": False,
            "harness": "compare_strings",
            "commit": PERCENT_COMMIT,
        }


def math_verify_verdict(case: dict, default_options: bool) -> int:
    """math-verify's own verdict at the test's options, or at its defaults (latex + expr extraction as the
    test's harness builds it, ``float_rounding=6``, ``strict=True``, ``allow_set_relation_comp=False``)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    if default_options:
        case = {
            **case,
            "match_types": ["latex", "expr"],
            "precision": 6,
            "strict": True,
            "allow_set_relation_comp": False,
        }
    if case["harness"] == "parse_default_config" or default_options:
        config = [
            LatexExtractionConfig(boxed_match_priority=0 if case["harness"] == "compare_strings" else 55),
            ExprExtractionConfig(),
        ]
    else:
        config = [LatexExtractionConfig(boxed_match_priority=0)] if "latex" in case["match_types"] else []
        config += [ExprExtractionConfig()] if "expr" in case["match_types"] else []
    g, p = parse(case["gold"], config), parse(case["pred"], config)
    return int(
        verify(
            g,
            p,
            float_rounding=case["precision"],
            strict=case["strict"],
            allow_set_relation_comp=case["allow_set_relation_comp"],
        )
    )


def main(git_dir: str) -> None:
    from importlib.metadata import version

    import math_verify  # noqa: F401

    print(
        json.dumps(
            {
                "_header": True,
                "source": "https://github.com/huggingface/Math-Verify",
                "commit": COMMIT,
                "percent_cases_commit": PERCENT_COMMIT,
                "licence": "Apache-2.0 (see MATH_VERIFY_LICENCE)",
                "math_verify_version_of_verdicts": version("math-verify"),
                "version_note": "the 0.9.0 release commit is not in the fetchable history; COMMIT is the "
                "newest there (0.8.0 + PR #45), plus the six percent cases 0.9.0 added, "
                "read from percent_cases_commit; math-verify 0.9.0 passes all 275",
                "note": "test parameters only (gold, pred, expected, options); mv_* are math-verify's own "
                "verdicts at the test's options and at its default options",
            }
        )
    )
    for case in cases(git_dir):
        case["mv_test_options"] = math_verify_verdict(case, default_options=False)
        case["mv_default_options"] = math_verify_verdict(case, default_options=True)
        print(json.dumps(case, ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1])
