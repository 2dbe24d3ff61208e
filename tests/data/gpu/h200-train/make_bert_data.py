"""Device side of the BERT proxy run: a WordPiece vocab and a small sentence-level indexed dataset, written
with Megatron-LM's own code (effebd81 on PYTHONPATH, torch and numpy present):

    python3 make_bert_data.py PREFIX [--vocab FILE] [--documents N] [--seed S]

PREFIX is the dataset prefix that --data-path gets (e.g. /data/bert/my-bert_text_sentence): PREFIX.bin and
PREFIX.idx are written, the vocab to --vocab (default: bert-vocab.txt beside PREFIX). The layout is what
tools/preprocess_data.py --split-sentences writes for BERT @ effebd81 (tools/preprocess_data.py:103-113 and
179-191): one IndexedDatasetBuilder item per sentence, add_document(doc_ids, sentence_lens) per document,
dtype DType.optimal_dtype(vocab_size); pretrain_bert's BERTMaskedWordPieceDataset reads documents through
document_indices and sentences through sequence_lengths (megatron/core/datasets/masked_dataset.py:113,
helpers.cpp build_mapping), so every document has at least two sentences (the SOP head needs two,
bert_dataset.py:59) and no sentence is near helpers.cpp's LONG_SENTENCE_LEN (512).

The text is synthetic but learnable: a small grammar over a few thousand made-up lowercase words in which
a noun's class fixes its adjectives and verbs (masked words are predictable from their neighbours) and
every sentence of a document opens with its ordinal ("first", "second", ...: sentence order is visible,
so the SOP head has something to learn).

The vocab's [PAD] is id 0: bert_dataset.py:140-148 pads `types` and `padding_mask` with the pad id, so a
non-zero pad id would put that id into the token-type embedding (2 rows) and into the padding mask.

Tokenization goes through Megatron's legacy _BertWordPieceTokenizer (megatron/training/tokenizer/
tokenizer.py:194: the class `--tokenizer-type BertWordPieceLowerCase` builds for the global tokenizer and,
with --legacy-tokenizer, for the dataset), and each sentence's ids are checked against the vocab (no
[UNK]). Without --legacy-tokenizer, pretrain_bert.py:149-152 builds the dataset's tokenizer with
megatron.core.tokenizers (library 'megatron'), i.e. transformers.AutoTokenizer.from_pretrained(
'bert-large-uncased', vocab_file=...), which asks the Hugging Face hub: offline it fails. --direct skips
Megatron's tokenizer (host checks without torch).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth"]
FUNCTION = ["the", "a", "near", "with", "and", "then", "under", "over", "from", "into", "today", "again",
            "saw", "said", "that", "was", "very", "quite", "in", "of", "to", ".", ",", ";"]
CLASSES = 24
SIZES = {"name": 240, "noun": 1440, "adj": 480, "verb": 720, "place": 240}
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


def make_words(rng: random.Random, taken: set[str]) -> dict[str, list[str]]:
    """Made-up lowercase words of 2 or 3 syllables, distinct and unlike any function word."""
    out: dict[str, list[str]] = {}
    for kind, n in SIZES.items():
        words: list[str] = []
        while len(words) < n:
            w = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.choice((2, 3))))
            if w not in taken:
                taken.add(w)
                words.append(w)
        out[kind] = words
    return out


def vocab_tokens(words: dict[str, list[str]]) -> list[str]:
    toks = SPECIALS + ORDINALS + FUNCTION
    for kind in SIZES:
        toks += words[kind]
    assert len(set(toks)) == len(toks), "duplicate vocab entries"
    return toks


def sentence(rng: random.Random, words: dict[str, list[str]], position: int, topic: str) -> list[str]:
    """One sentence of the grammar: ordinal first, class agreement between noun, adjective and verb."""
    def of_class(kind: str, c: int) -> str:
        pool = words[kind]
        return pool[c + CLASSES * rng.randrange(len(pool) // CLASSES)]

    noun_i = rng.randrange(len(words["noun"]))
    c = noun_i % CLASSES
    noun, adj, verb = words["noun"][noun_i], of_class("adj", c), of_class("verb", c)
    obj_i = rng.randrange(len(words["noun"]))
    obj, obj_adj = words["noun"][obj_i], of_class("adj", obj_i % CLASSES)
    place = words["place"][c * len(words["place"]) // CLASSES + rng.randrange(len(words["place"]) // CLASSES)]
    head = [ORDINALS[position % len(ORDINALS)]]
    form = rng.randrange(4)
    if form == 0:
        body = ["the", adj, noun, verb, "the", obj_adj, obj, "."]
    elif form == 1:
        body = [",", topic, "saw", "the", adj, noun, "near", place, "."]
    elif form == 2:
        body = ["the", "very", adj, noun, verb, "again", "in", place, "."]
    else:
        body = [",", topic, "said", "that", "the", noun, "was", adj, ";", "then", verb, "."]
    return head + body


def documents(rng: random.Random, words: dict[str, list[str]], n: int) -> list[list[list[str]]]:
    docs = []
    for _ in range(n):
        topic = rng.choice(words["name"])
        docs.append([sentence(rng, words, k, topic) for k in range(rng.randint(4, 10))])
    return docs


def megatron_tokenizer(vocab_path: str):  # type: ignore[no-untyped-def]
    """Megatron's legacy BERT tokenizer (what --tokenizer-type BertWordPieceLowerCase builds)."""
    from megatron.training.tokenizer.tokenizer import _BertWordPieceTokenizer

    return _BertWordPieceTokenizer(vocab_file=vocab_path, lower_case=True, vocab_extra_ids=0)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", help="dataset prefix (PREFIX.bin, PREFIX.idx)")
    ap.add_argument("--vocab", help="vocab file to write (default: bert-vocab.txt beside PREFIX)")
    ap.add_argument("--documents", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--direct", action="store_true", help="map words to ids directly, not via Megatron's tokenizer")
    a = ap.parse_args(argv)
    t0 = time.time()
    prefix = os.path.abspath(a.prefix)
    vocab_path = os.path.abspath(a.vocab or os.path.join(os.path.dirname(prefix), "bert-vocab.txt"))
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    os.makedirs(os.path.dirname(vocab_path), exist_ok=True)
    rng = random.Random(a.seed)
    words = make_words(rng, set(SPECIALS + ORDINALS + FUNCTION))
    toks = vocab_tokens(words)
    with open(vocab_path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in toks))
    ids = {t: i for i, t in enumerate(toks)}
    docs = documents(rng, words, a.documents)

    import numpy
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

    tokenizer = None if a.direct else megatron_tokenizer(vocab_path)
    if tokenizer is not None:
        assert tokenizer.pad == 0 and tokenizer.cls == ids["[CLS]"] and tokenizer.sep == ids["[SEP]"]
        assert tokenizer.mask == ids["[MASK]"], "special ids differ from the vocab file"
    vocab_size = tokenizer.vocab_size if tokenizer is not None else len(toks)
    dtype = DType.optimal_dtype(vocab_size)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    n_sent = n_tok = 0
    first: list[int] = []
    for d, doc in enumerate(docs):
        doc_ids: list[int] = []
        lens: list[int] = []
        for s in doc:
            expect = [ids[w] for w in s]
            if tokenizer is not None:
                got = tokenizer.tokenize(" ".join(s))
                if got != expect:
                    raise SystemExit(f"Megatron's tokenizer disagrees on {' '.join(s)!r}: {got} != {expect}")
            doc_ids.extend(expect)
            lens.append(len(expect))
        if d == 0:
            first = doc_ids[:]
        builder.add_document(numpy.array(doc_ids, dtype=numpy.int64), lens)
        n_sent += len(lens)
        n_tok += len(doc_ids)
    builder.finalize(prefix + ".idx")

    # Read it back through Megatron's reader, as BERTMaskedWordPieceDataset does.
    ds = IndexedDataset(prefix)
    assert len(ds) == n_sent, (len(ds), n_sent)
    assert ds.document_indices.shape[0] == len(docs) + 1
    assert int(ds.sequence_lengths.sum()) == n_tok
    back = numpy.concatenate([ds[i] for i in range(ds.document_indices[0], ds.document_indices[1])]).tolist()
    assert back == first, "document 0 reads back differently"
    summary = {"prefix": prefix, "vocab": vocab_path, "vocab_entries": len(toks), "tokenizer_vocab_size": vocab_size,
               "tokenizer": "direct" if tokenizer is None else type(tokenizer).__name__,
               "dtype": numpy.dtype(dtype).name, "documents": len(docs), "sentences": n_sent, "tokens": n_tok,
               "max_sentence_tokens": int(ds.sequence_lengths.max()), "bin_bytes": os.path.getsize(prefix + ".bin"),
               "example": " ".join(toks[i] for i in first[:40]), "seconds": round(time.time() - t0, 2)}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
