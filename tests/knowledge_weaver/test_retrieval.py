"""Bank retrieval: BM25 by hand, ties by entry id, and the mean-pool encoder on a tiny local BERT."""

import math

import pytest
import torch

from skl_verl.knowledge_weaver.retrieval import (
    BankEntry,
    BM25Retriever,
    HFMeanPoolRetriever,
    query_task_type,
    retrieval_query,
)

ENTRIES = [
    BankEntry("e2", "Open the drawer before you look for the key."),
    BankEntry("e1", "Heat the mug in the microwave, then put it on the table."),
    BankEntry("e3", "Clean the apple in the sink basin."),
]


def test_bm25_scores_by_hand():
    scores = BM25Retriever().scores(["microwave mug"], ENTRIES)
    lengths = [9, 12, 7]
    average = sum(lengths) / 3

    def term(tf, length):  # each word occurs in one document of three
        idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
        return idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * length / average))

    assert scores[0].tolist() == pytest.approx([0.0, 2 * term(1, 12), 0.0])
    assert BM25Retriever().rank(["microwave mug", "sink apple drawer"], ENTRIES, 2)[0][0] == 1


def test_equal_scores_rank_by_entry_id():
    entries = [BankEntry("b", "same text"), BankEntry("a", "same text"), BankEntry("c", "other words")]
    assert BM25Retriever().rank(["same"], entries, 3) == [[1, 0, 2]]
    assert BM25Retriever().rank(["nothing matches"], entries, 2) == [[1, 0]]


def test_the_query_names_the_type_in_the_authors_words():
    """Issue 39 item 8: the authors' query builders name ALFWorld's game task type and ``WebShop/<category>`` (ours
    named ``Pick`` and ``beauty``); the whole text, line by line, as theirs."""
    assert query_task_type("alfworld", "Pick") == "pick_and_place_simple"
    assert query_task_type("alfworld", "Pick2") == "pick_two_obj_and_place"
    assert query_task_type("webshop", "beauty") == "WebShop/beauty"
    assert query_task_type("frozenlake", "4x4") == "4x4"
    query = retrieval_query(query_task_type("webshop", "beauty"), "i need a  lipstick", "WebShop\n[SEP] Search")
    assert query == ("Task type: WebShop/beauty\nTask description: i need a lipstick\nCurrent observation: WebShop [SEP] "
                     "Search\nPrevious 8 commands: none (retrieval occurs before the first action)\nRecent 5 online-memory "
                     "action/result pairs: none (retrieval occurs before the first action)")


def test_query_has_the_five_lines_whitespace_collapsed():
    query = retrieval_query("pick_heat_then_place", "heat a mug and   put it\non the table", "You are in the middle of a room.")
    lines = query.split("\n")
    assert len(lines) == 5 and lines[1] == "Task description: heat a mug and put it on the table"


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    corpus = [e.text for e in ENTRIES] + ["heat the cup", "look for the key in the drawer"]
    tokenizer.train_from_iterator(corpus, trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    BertTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                      sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    return str(folder)


def test_mean_pool_ignores_padding_and_ranks_by_cosine(tiny_encoder):
    retriever = HFMeanPoolRetriever(tiny_encoder, device="cpu")
    texts = ["heat the cup", *[e.text for e in ENTRIES]]
    batched = retriever.embed(texts)  # padded to the longest text
    alone = torch.cat([retriever.embed([t]) for t in texts])  # no padding at all
    assert torch.allclose(batched, alone, atol=1e-5)
    assert torch.allclose(batched.norm(dim=1), torch.ones(len(texts)), atol=1e-6)
    cosine = (alone[:1] @ alone[1:].T)[0]
    expected = sorted(range(3), key=lambda i: (-cosine[i].item(), ENTRIES[i].entry_id))
    assert retriever.rank(["heat the cup"], ENTRIES, 3) == [expected]
