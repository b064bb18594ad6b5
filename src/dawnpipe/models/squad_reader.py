"""A DrQA-style SQuAD reader (Chen et al. 2017, "Reading Wikipedia to Answer
Open-Domain Questions"), trained from scratch.

Context token i is represented by its word embedding, a character-CNN
embedding (BiDAF's answer to unknown words; ``char_dim: 0`` turns it off), its
exact-match features (occurs in the question as is / lower-cased) and the
*aligned question embedding* (attention over the question's embeddings). A
stacked BiLSTM encodes the context (all layers' outputs concatenated, as in
DrQA), another the question, which self-attention pools into one vector q.
Bilinear terms c_i W_s q and c_i W_e q score the answer's start and end.
``best_spans`` picks argmax p_start(i) * p_end(j) over i <= j < i + max_answer_tokens.

Differences from DrQA, on purpose: no pretrained GloVe (none can be fetched
here; ``pretrained_embeddings`` in the trainer loads a local file into
``embedding``), no POS/NER/term-frequency features (no tagger), a character
CNN added instead. Masks are True at padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MASKED = -1e30  # finite: a fully padded row gives a uniform softmax instead of NaN


class CharCNN(nn.Module):
    def __init__(self, n_chars: int, char_dim: int, filters: int, kernel: int):
        super().__init__()
        self.embedding = nn.Embedding(n_chars, char_dim, padding_idx=0)
        self.conv = nn.Conv1d(char_dim, filters, kernel, padding=kernel // 2)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:  # B x L x W -> B x L x filters
        b, length, w = chars.shape
        x = self.embedding(chars.reshape(b * length, w)).transpose(1, 2)  # (B*L) x D x W
        x = F.relu(self.conv(x)).max(dim=2).values
        return x.reshape(b, length, -1)


class StackedBiLSTM(nn.Module):
    """BiLSTM layers with dropout on each layer's input; returns all layers' outputs concatenated."""

    def __init__(self, input_size: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.dropout = dropout
        self.rnns = nn.ModuleList(nn.LSTM(input_size if i == 0 else 2 * hidden, hidden, batch_first=True, bidirectional=True) for i in range(layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = (~mask).sum(dim=1).clamp(min=1)
        padded = bool(mask.any())
        outputs = []
        for rnn in self.rnns:
            x = F.dropout(x, self.dropout, self.training)
            if padded:  # pack, so the backward direction starts at each sequence's real end
                packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
                out, _ = rnn(packed)
                x, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=mask.shape[1])
            else:
                x, _ = rnn(x)
            outputs.append(x)
        return F.dropout(torch.cat(outputs, dim=2), self.dropout, self.training)


class AlignedAttention(nn.Module):
    """For each context token, an attention-weighted sum of the question embeddings
    (scores relu(W c_i) . relu(W q_j), DrQA's f_align)."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, c: torch.Tensor, q: torch.Tensor, q_mask: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(F.relu(self.proj(c)), F.relu(self.proj(q)).transpose(1, 2))  # B x Lc x Lq
        scores = scores.float().masked_fill(q_mask[:, None, :], MASKED)
        return torch.bmm(F.softmax(scores, dim=2).to(q.dtype), q)


class SelfAttentivePool(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = F.softmax(self.score(x).squeeze(2).float().masked_fill(mask, MASKED), dim=1)
        return torch.bmm(weights.to(x.dtype)[:, None, :], x).squeeze(1)


class DrQAReader(nn.Module):
    def __init__(
        self,
        n_words: int,
        n_chars: int,
        *,
        embedding_dim: int = 100,
        char_dim: int = 16,
        char_filters: int = 50,
        char_kernel: int = 5,
        hidden: int = 64,
        layers: int = 2,
        dropout: float = 0.3,
        n_features: int = 2,
    ):
        super().__init__()
        self.embedding = nn.Embedding(n_words, embedding_dim, padding_idx=0)
        self.chars = CharCNN(n_chars, char_dim, char_filters, char_kernel) if char_dim else None
        token_dim = embedding_dim + (char_filters if char_dim else 0)
        self.align = AlignedAttention(token_dim)
        self.context_rnn = StackedBiLSTM(2 * token_dim + n_features, hidden, layers, dropout)
        self.question_rnn = StackedBiLSTM(token_dim, hidden, layers, dropout)
        out_dim = 2 * hidden * layers
        self.question_pool = SelfAttentivePool(out_dim)
        self.start = nn.Linear(out_dim, out_dim, bias=False)  # c_i W_s q
        self.end = nn.Linear(out_dim, out_dim, bias=False)
        self.dropout = dropout

    def embed(self, words: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
        x = self.embedding(words)
        if self.chars is not None:
            x = torch.cat([x, self.chars(chars)], dim=2)
        return F.dropout(x, self.dropout, self.training)

    def forward(self, c_words, c_chars, c_feat, c_mask, q_words, q_chars, q_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end logits (float32, B x Lc; padding at MASKED)."""
        c = self.embed(c_words, c_chars)
        q = self.embed(q_words, q_chars)
        aligned = self.align(c, q, q_mask)
        c_enc = self.context_rnn(torch.cat([c, aligned, c_feat.to(c.dtype)], dim=2), c_mask)
        q_vec = self.question_pool(self.question_rnn(q, q_mask), q_mask)
        start = torch.bmm(self.start(c_enc), q_vec[:, :, None]).squeeze(2).float().masked_fill(c_mask, MASKED)
        end = torch.bmm(self.end(c_enc), q_vec[:, :, None]).squeeze(2).float().masked_fill(c_mask, MASKED)
        return start, end


def best_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, max_answer_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, (i, j) maximising p_start(i) * p_end(j) with i <= j < i + max_answer_tokens.
    Scores only the allowed pairs (B x L x max_answer_tokens), not all L x L."""
    log_start = F.log_softmax(start_logits.float(), dim=1)
    log_end = F.pad(F.log_softmax(end_logits.float(), dim=1), (0, max_answer_tokens - 1), value=float("-inf"))
    scores = log_start[:, :, None] + log_end.unfold(1, max_answer_tokens, 1)  # [b, i, d] = start i, end i + d
    flat = scores.flatten(1).argmax(dim=1)
    first = flat // max_answer_tokens
    return first, first + flat % max_answer_tokens


MODELS = {"drqa": DrQAReader}


def build_reader(name: str, n_words: int, n_chars: int, **model_args) -> nn.Module:
    from dawnpipe.errors import DawnpipeError

    if name not in MODELS:
        raise DawnpipeError(f"unknown SQuAD reader model {name!r} (known: {', '.join(MODELS)})")
    try:
        return MODELS[name](n_words, n_chars, **model_args)
    except TypeError as e:  # an unknown or misspelt key in model_args
        raise DawnpipeError(f"model {name}: bad model_args ({e})") from None
