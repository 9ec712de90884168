"""A labelled text set whose label depends on word order only, for the text
classifier of examples/text/ (README.md there).

Every sentence is 6 to 14 words of Debian's word list (wamerican's
/usr/share/dict/words: the lowercase words of 3 to 8 letters) and holds two
cue words, the same two in every sentence, at random places. The label is 1
when the first cue comes before the second, else 0. So each sentence has the
same bag of cue words whatever its label: a bag-of-words model can only guess
(accuracy near 0.5), while a model that reads the words in order can learn
the rule. The first word is capitalized and the sentence ends with a full
stop, which TextVectorization's default standardize (lower and strip
punctuation) removes.

Everything comes from Python's random module seeded with --seed, so the same
arguments and word list write the same bytes.

usage: make_order_data.py --out DIR [--seed S] [--train N] [--eval N]
                          [--fillers K] [--words FILE]
writes DIR/train.csv and DIR/eval.csv (header "text,label").
"""
import argparse
import os
import random
import re
import sys


def read_words(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            words = sorted({w.strip() for w in f if re.fullmatch(r"[a-z]{3,8}", w.strip())})
    except OSError as e:
        sys.exit(f"make_order_data.py: {e} (Debian's wamerican package installs /usr/share/dict/words)")
    if len(words) < 100:
        sys.exit(f"make_order_data.py: {path} holds only {len(words)} lowercase words of 3 to 8 letters")
    return words


def sentence(rng, fillers, first, second):
    n = rng.randint(6, 14)
    words = [rng.choice(fillers) for _ in range(n - 2)]
    a, b = sorted(rng.sample(range(n), 2))
    label = rng.randint(0, 1)
    cues = (first, second) if label else (second, first)
    words.insert(a, cues[0])
    words.insert(b, cues[1])
    return " ".join(words).capitalize() + ".", label


def write(path, rows):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write("text,label\n")
        for text, label in rows:
            f.write(f"{text},{label}\n")
    os.replace(path + ".tmp", path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=44)
    p.add_argument("--train", type=int, default=8000)
    p.add_argument("--eval", type=int, default=2000)
    p.add_argument("--fillers", type=int, default=2000)
    p.add_argument("--words", default="/usr/share/dict/words")
    a = p.parse_args()
    if a.train < 1 or a.eval < 1 or a.fillers < 10:
        sys.exit("make_order_data.py: --train and --eval must be >= 1, --fillers >= 10")
    rng = random.Random(a.seed)
    words = read_words(a.words)
    first, second = rng.sample(words, 2)
    rest = [w for w in words if w not in (first, second)]
    fillers = rng.sample(rest, min(a.fillers, len(rest)))
    os.makedirs(a.out, exist_ok=True)
    for name, n in (("train", a.train), ("eval", a.eval)):
        rows = [sentence(rng, fillers, first, second) for _ in range(n)]
        write(os.path.join(a.out, name + ".csv"), rows)
        rate = sum(label for _, label in rows) / n
        print(f"{name}.csv: {n} sentences, label rate {rate:.4f}, cue words \"{first}\" before \"{second}\" is 1, "
              f"{len(fillers)} filler words")


if __name__ == "__main__":
    main()
