"""One pool of raw documents -> serialized pretraining records and their statistics.

This is the unit of work that the local worker processes, the in-memory mode and the Beam pipeline
share: tokenize the sentences (dropping those that tokenize to nothing, then empty documents, as the
original does), make the original's instances, and serialize them with the record schema.
"""
import random
from typing import Iterable, Iterator, NamedTuple

from data_gen.pretraining import schema
from data_gen.pretraining.instances import DrawCounts, InstanceSettings, create_pool_instances
from data_gen.pretraining.stats import PretrainingStats
from data_gen.tokenization import FullTokenizer, special_token_ids

REQUIRED_TOKENS = ("[CLS]", "[SEP]", "[MASK]")


class PoolRecords(NamedTuple):
    records: list  # serialized tf.train.Example, in the pool's shuffled order
    stats: PretrainingStats


class RecordMaker:
    """A tokenizer and the instance settings; build one per process and reuse it for every pool."""

    def __init__(self, vocab_file: str, do_lower_case: bool, settings: InstanceSettings):
        self.settings = settings.check()
        self.tokenizer = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
        special_token_ids(self.tokenizer.vocab, REQUIRED_TOKENS, source=vocab_file)
        self.vocab_words = list(self.tokenizer.vocab.keys())
        self._vocab = dict(self.tokenizer.vocab)  # a plain dict looks up faster than OrderedDict

    def tokenize(self, documents: Iterable[list]) -> list:
        """Documents of sentences -> non-empty documents of non-empty token lists."""
        tokenized = []
        for sentences in documents:
            document = [tokens for tokens in map(self.tokenizer.tokenize, sentences) if tokens]
            if document:
                tokenized.append(document)
        return tokenized

    def pool_records(self, documents: list, rng: random.Random) -> PoolRecords:
        """Records of tokenized `documents`, drawing from `rng` as the original does."""
        stats = PretrainingStats(self.settings.max_seq_length)
        return PoolRecords(list(self.iter_records(documents, rng, stats)), stats)

    def iter_records(self, documents: list, rng: random.Random,
                     stats: PretrainingStats) -> Iterator[bytes]:
        """Like `pool_records`, one record at a time (the instances are all made first)."""
        stats.add_documents(documents)
        draws = DrawCounts()
        instances = create_pool_instances(documents, self.settings, self.vocab_words, rng, draws)
        stats.add_draws(draws)
        for instance in instances:
            stats.add_instance(instance)
            yield self.serialize(instance)

    def serialize(self, instance) -> bytes:
        to_ids = self._ids
        features = schema.padded_features(
            to_ids(instance.tokens), instance.segment_ids, instance.masked_lm_positions,
            to_ids(instance.masked_lm_labels), int(instance.is_random_next),
            self.settings.max_seq_length, self.settings.max_predictions_per_seq)
        return schema.serialize_example(features)

    def _ids(self, tokens: list) -> list:
        """`convert_tokens_to_ids`, faster: an unknown token raises KeyError, as in the original."""
        return list(map(self._vocab.__getitem__, tokens))
