"""Grade each function of textutils.py independently; write reward.json."""
import importlib.util
import json
import random
import re
import string
import sys
import traceback

MODULE, OUT = sys.argv[1], sys.argv[2]


# ---- independent reference implementations ---------------------------------
def ref_slugify(t):
    out, sep = [], False
    for ch in t.lower():
        if ch in string.ascii_lowercase or ch in string.digits:
            if sep and out:
                out.append("-")
            out.append(ch)
            sep = False
        else:
            sep = True
    return "".join(out)


def ref_pal(t):
    s = "".join(c.lower() for c in t if c.isalnum())
    return s == s[::-1]


def ref_freq(t):
    d = {}
    for w in re.split(r"[^a-z0-9']+", t.lower()):
        w = w.strip("'")
        if w:
            d[w] = d.get(w, 0) + 1
    return d


def ref_caesar(t, k):
    res = []
    for c in t:
        if "a" <= c <= "z":
            res.append(chr((ord(c) - 97 + k) % 26 + 97))
        elif "A" <= c <= "Z":
            res.append(chr((ord(c) - 65 + k) % 26 + 65))
        else:
            res.append(c)
    return "".join(res)


def random_texts(seed, n=200):
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + " ,.!?'-_éüß\t"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(n)]


CASES = {
    "slugify": (
        [("Hello, World!", "hello-world"), ("  --Already--Slugged--  ", "already-slugged"),
         ("Crème brûlée", "cr-me-br-l-e"), ("", ""), ("!!!", ""), ("ABC 123", "abc-123")],
        lambda f: [(t, ref_slugify(t)) for t in random_texts(1)],
    ),
    "is_palindrome": (
        [("A man, a plan, a canal: Panama", True), ("", True), ("...", True),
         ("ab", False), ("No 'x' in Nixon", True), ("12321", True), ("123 21a", False)],
        lambda f: [(t, ref_pal(t)) for t in random_texts(2)] + [(t + t[::-1], True) for t in random_texts(3, 50)],
    ),
    "word_frequencies": (
        [("It's the cat's hat. 'Hat' it's!", {"it's": 2, "the": 1, "cat's": 1, "hat": 2}),
         ("", {}), ("'' ' '''", {}), ("a A a-b", {"a": 3, "b": 1})],
        lambda f: [(t, ref_freq(t)) for t in random_texts(4)],
    ),
    "caesar": (
        [(("Hello, World!", 3), "Khoor, Zruog!"), (("xyz XYZ", 3), "abc ABC"),
         (("abc", -1), "zab"), (("Mixed 123!", 26 * 4 + 1), "Njyfe 123!"), (("", 5), "")],
        lambda f: [((t, k), ref_caesar(t, k)) for k, t in zip(range(-60, 60, 3), random_texts(5, 40))],
    ),
}


def check(func, name):
    fixed, gen = CASES[name]
    for args, want in fixed + gen(func):
        args = args if isinstance(args, tuple) else (args,)
        got = func(*args)
        if got != want or type(got) is not type(want):
            print(f"[{name}] {args!r}: got {got!r}, want {want!r}")
            return 0.0
    return 1.0


def main():
    result = {"parse_ok": 0.0}
    names = list(CASES)
    mod = None
    try:
        spec = importlib.util.spec_from_file_location("textutils_under_test", MODULE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        result["parse_ok"] = 1.0
    except BaseException:
        traceback.print_exc()
    for name in names:
        score = 0.0
        if mod is not None:
            try:
                score = check(getattr(mod, name), name)
            except BaseException as exc:  # includes NotImplementedError, SystemExit
                print(f"[{name}] raised {type(exc).__name__}: {exc}")
        result[name] = score
    result["reward"] = round(sum(result[n] for n in names) / len(names), 4)
    with open(OUT, "w") as fh:
        json.dump(result, fh)


main()
