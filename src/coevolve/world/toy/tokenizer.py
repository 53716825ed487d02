"""Character-level tokenizer of the toy world, wrapped as a real ``PreTrainedTokenizerFast``.

Why char-level: arithmetic traces need exact digits, the vocabulary stays ~100 tokens, and the
tokenizer still goes through ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` exactly as
a real model's would. The four tag strings of the output formats are single (non-special)
added tokens so sequences stay short and ``decode(skip_special_tokens=True)`` keeps them.
"""

from __future__ import annotations

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0..3
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
TAG_TOKENS: tuple[str, ...] = ("<think>", "</think>", "<question>", "</question>")
CHARS: tuple[str, ...] = tuple(chr(i) for i in range(32, 127)) + ("\n",)  # 96 printable chars


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Fresh toy tokenizer: vocab = 4 specials + 96 chars + 4 tags = 104; BOS is prepended by
    the post-processor; padding on the left (what batched generation needs)."""
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + CHARS + TAG_TOKENS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", BOS_ID)]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )
