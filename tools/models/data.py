"""Training data made here, so nothing is downloaded.

corpus()        a deterministic English-like play script over exactly the 65
                characters of nanoGPT's shakespeare-char vocabulary (every one of
                them occurs), from a seeded generator: speaker headings in
                capitals, lines built from a small grammar of clauses.
encode/decode   characters <-> indices into VOCAB.
get_batch()     (B, T) inputs and next-character targets at random offsets
                drawn from a torch.Generator.
images()        synthetic 3-channel images for the CNN: each of the classes
                is a fixed random low-frequency pattern; a sample is its class
                pattern, randomly shifted, scaled and noised.
"""
import random

import torch

VOCAB = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
assert len(VOCAB) == 65 and len(set(VOCAB)) == 65
STOI = {c: i for i, c in enumerate(VOCAB)}

# --- the text ----------------------------------------------------------------------

SPEAKERS = ["KING HENRY", "QUEEN MARGARET", "DUKE OF YORK", "JULIET", "ROMEO", "FIRST CITIZEN",
            "SECOND CITIZEN", "LADY MACBETH", "PROSPERO", "BIANCA", "WARWICK", "FRIAR LAURENCE",
            "GLOUCESTER", "VOLUMNIA", "ZEPHYR", "JAQUES", "OXFORD", "EXETER", "QUINCE", "KATHARINA"]
NOUNS = ["king", "crown", "sword", "heart", "night", "day", "love", "grief", "blood", "honour",
         "father", "mother", "brother", "queen", "lord", "lady", "soul", "death", "life", "eye",
         "hand", "tongue", "world", "heaven", "fortune", "friend", "enemy", "war", "peace", "grace",
         "field", "tower", "jewel", "quarrel", "oath", "wax", "zeal", "fox", "vexation", "justice"]
ADJS = ["gentle", "noble", "sweet", "cruel", "proud", "fair", "dark", "bloody", "honest", "true",
        "false", "poor", "old", "young", "brave", "quick", "lazy", "jealous", "wicked", "royal"]
VERBS = ["love", "hate", "kill", "speak", "swear", "bear", "know", "fear", "keep", "seek",
         "find", "give", "take", "bring", "leave", "mark", "pardon", "banish", "vex", "quit"]
VERBS_3 = ["loves", "hates", "kills", "speaks", "swears", "bears", "knows", "fears", "keeps",
           "seeks", "finds", "gives", "takes", "brings", "leaves", "marks", "pardons", "banishes"]
SUBJECTS = ["I", "we", "you", "thou", "he", "she", "they", "my lord", "your grace", "the king"]
OPENERS = ["O", "Alas", "Nay", "Ay", "What", "Why", "Now", "Come", "Go", "Hark", "Well", "Yes"]
PLACES = ["London", "Verona", "Padua", "Milan", "Rome", "Bohemia", "Venice", "Illyria", "Dover",
          "York", "Windsor", "Elsinore", "Naples", "Tyre", "Ephesus", "Athens", "Kent"]


def _by_chance(r, *forms):
    """One of forms, (bound, make) pairs with rising bounds, the last 1: the
    first whose bound is above one draw of r.random(); returns make()."""
    k = r.random()
    return next(make for bound, make in forms if k < bound)()


def _np(r):
    """a noun phrase: 'the noble king', 'my heart', "the king's crown" ..."""
    det = r.choice(["the", "my", "thy", "your", "his", "her", "our", "this", "that"])
    n = r.choice(NOUNS)
    return _by_chance(r, (0.3, lambda: f"{det} {r.choice(ADJS)} {n}"),
                      (0.4, lambda: f"{det} {n}'s {r.choice(NOUNS)}"),
                      (0.5, lambda: f"{det} {n} of {r.choice(PLACES)}"),
                      (1, lambda: f"{det} {n}"))


def _clause(r):
    s = r.choice(SUBJECTS)
    third = s in ("he", "she", "my lord", "your grace", "the king")
    v = r.choice(VERBS_3) if third else r.choice(VERBS)
    return _by_chance(r, (0.15, lambda: f"{s} will {r.choice(VERBS)} {_np(r)}"),
                      (0.25, lambda: f"{s} {v} {_np(r)} and {_np(r)}"),
                      (0.32, lambda: f"{s} {v} {_np(r)} - {_np(r)}"),
                      (1, lambda: f"{s} {v} {_np(r)}"))


def _sentence(r):
    parts = [_clause(r)]
    while r.random() < 0.35:
        parts.append(r.choice([", ", "; ", ": ", " & "]) + _clause(r))
    body = "".join(parts)
    if r.random() < 0.3:
        body = r.choice(OPENERS) + ", " + body
    end = r.choices([".", "!", "?", "."], k=1)[0]
    if r.random() < 0.02:
        body += ", for 3 $ of gold"        # the corpus's '3' and '$' beyond the prologue
    return body[0].upper() + body[1:] + end


def _speech(r, width=60):
    """one speaker heading and a few lines, wrapped near width columns"""
    words = " ".join(_sentence(r) for _ in range(r.randint(1, 4))).split(" ")
    lines, cur = [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    return r.choice(SPEAKERS) + ":\n" + "\n".join(lines) + "\n\n"


# Every character of VOCAB, once, in a stage direction at the top: the corpus
# has exactly the 65-character vocabulary whatever the seed.
_PROLOGUE = ("PROLOGUE:\nBy Jove, quick zephyrs blow; vex daft Jim & jolly Wu's hexing "
             "kobolds - 3 $ paid? Yes! THE QUICK BROWN FOX JUMPS OVER A LAZY DOG.\n\n")
assert set(_PROLOGUE) == set(VOCAB), sorted(set(VOCAB) - set(_PROLOGUE))


def corpus(n_chars=1_000_000, seed=1337):
    """A deterministic text of exactly n_chars characters over VOCAB."""
    r = random.Random(seed)
    out, n = [_PROLOGUE], len(_PROLOGUE)
    while n < n_chars:
        s = _speech(r)
        out.append(s)
        n += len(s)
    text = "".join(out)[:n_chars]
    return text


def encode(text):
    return torch.tensor([STOI[c] for c in text], dtype=torch.long)


def decode(ids):
    return "".join(VOCAB[i] for i in ids)


def train_val(n_chars=1_000_000, seed=1337, val_frac=0.1):
    """(train, val) int64 tensors of character indices, split 90/10 like nanoGPT."""
    data = encode(corpus(n_chars, seed))
    n = int(len(data) * (1 - val_frac))
    return data[:n], data[n:]


def get_batch(data, batch, block, generator, device="cpu"):
    """(x, y): batch rows of block characters at random offsets, y shifted by one."""
    ix = torch.randint(len(data) - block - 1, (batch,), generator=generator)
    x = torch.stack([data[i:i + block] for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix.tolist()])
    return x.to(device), y.to(device)


# --- the images --------------------------------------------------------------------

def images(n, size=16, classes=10, seed=0):
    """(x, y): n images (n, 3, size, size) float32 and labels (n,) int64."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(classes, 3, 4, 4, generator=g)
    templates = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear",
                                                align_corners=False)
    y = torch.randint(classes, (n,), generator=g)
    shift = torch.randint(-2, 3, (n, 2), generator=g)
    scale = 0.75 + 0.5 * torch.rand(n, 1, 1, 1, generator=g)
    x = torch.stack([templates[c].roll((int(s[0]), int(s[1])), dims=(1, 2))
                     for c, s in zip(y.tolist(), shift)])
    x = x * scale + 0.3 * torch.randn(n, 3, size, size, generator=g)
    return x.contiguous(), y


if __name__ == "__main__":
    t = corpus(2000)
    print(t)
    full = corpus()
    print(len(full), "characters,", len(set(full)), "distinct; exactly VOCAB:", set(full) == set(VOCAB))
