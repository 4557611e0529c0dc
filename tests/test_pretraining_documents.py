"""Reading documents: the original layout, WikiText, prose and JSON lines, sentence splitting,
bad bytes."""
import logging

import pytest

from bert_tf2.data_gen.pretraining import documents
from bert_tf2.data_gen.pretraining.documents import InputFormatError, InputOptions


def write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


def read(paths, input_format="sentence_lines", skip=False) -> list:
    options = InputOptions(input_format, skip)
    return [document.sentences for document in documents.stream_documents(paths, options)]


def test_sentence_lines_split_on_blank_lines_and_newline_only(tmp_path):
    # "\r\n" ends a line (the "\r" is stripped); a lone "\r" or U+2028 does not, as in the original.
    text = "  One.\r\nTwo\rhalves.\n \t\nThree\u2028four.\n\n\nFive."
    path = write(tmp_path / "a.txt", text.encode())
    assert read([path]) == [["One.", "Two\rhalves."], ["Three\u2028four."], ["Five."]]


def test_each_file_ends_its_document_but_the_original_reading_runs_on(tmp_path):
    first = write(tmp_path / "1.txt", b"A1.\nA2.\n")  # no blank line at the end
    second = write(tmp_path / "2.txt", b"B1.\n\nC1.\n")
    assert read([first, second]) == [["A1.", "A2."], ["B1."], ["C1."]]
    original = documents.original_documents([first, second], InputOptions())
    assert list(original) == [["A1.", "A2.", "B1."], ["C1."]]


def test_file_without_blank_lines_is_one_document_with_a_warning(tmp_path, caplog):
    path = write(tmp_path / "prose.txt", b"Line one.\nLine two.\nLine three.\n")
    with caplog.at_level(logging.WARNING):
        assert read([path]) == [["Line one.", "Line two.", "Line three."]]
    assert "prose.txt: no blank line in 3 lines, so it is read as ONE document" in caplog.text


def test_empty_file_gives_no_documents_and_a_warning(tmp_path, caplog):
    path = write(tmp_path / "empty.txt", b"")
    with caplog.at_level(logging.WARNING):
        assert read([path]) == []
    assert "empty.txt: empty file, no documents" in caplog.text


def test_binary_files_are_errors_naming_file_and_line(tmp_path):
    png = write(tmp_path / "image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(InputFormatError, match=r"image.png:1: not UTF-8 \(invalid start byte"):
        read([png])
    utf16 = write(tmp_path / "notes.txt", "Title\n\nText.\n".encode("utf-16-le"))
    with pytest.raises(InputFormatError, match=r"notes.txt:1: NUL byte at byte 2 .* binary file"):
        read([utf16])


def test_non_utf8_is_an_error_naming_file_and_line_or_dropped_on_request(shared_data, caplog):
    # A real case: this Gutenberg book has Latin-1 bytes on line 4631.
    book = str(shared_data / "corpus" / "nltk_gutenberg" / "chesterton-ball.txt")
    with pytest.raises(InputFormatError, match=r"chesterton-ball.txt:4631: not UTF-8 "
                                               r"\(invalid continuation byte.*--skip_invalid_utf8"):
        read([book], "prose")
    with caplog.at_level(logging.WARNING):
        (book_document,) = read([book], "prose", skip=True)
    assert "chesterton-ball.txt: dropped bytes that are not UTF-8 on 2 lines" in caplog.text
    assert len(book_document) > 3000


def test_wikitext_articles_start_at_titles_and_drop_headings(shared_data):
    path = str(shared_data / "corpus" / "wikitext-2" / "valid.txt")
    with open(path, encoding="utf-8") as f:
        titles = [line.strip() for line in f if line.startswith(" = ") and not
                  line.startswith(" = = ")]
    articles = read([path], "wikitext")
    assert len(articles) == len(titles) == 60
    assert articles[0][0].startswith("Homarus gammarus , known as the European lobster")
    text = " ".join(s for article in articles for s in article)
    assert " = = " not in text and " @-@ " not in text and " @.@ " not in text
    assert "3.1 – 3.3 in" in text  # "3 @.@ 1 – 3 @.@ 3 in" joined back


def test_prose_is_one_document_per_book_with_paragraphs_split(shared_data):
    books = sorted((shared_data / "corpus" / "nltk_gutenberg").glob("*.txt"))
    documents_ = read([str(b) for b in books], "prose", skip=True)
    assert len(documents_) == len(books) == 13
    emma = documents_[0]
    assert emma[:4] == ["[Emma by Jane Austen 1816]", "VOLUME I", "CHAPTER I",
                        "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and "
                        "happy disposition, seemed to unite some of the best blessings of "
                        "existence; and had lived nearly twenty-one years in the world with very "
                        "little to distress or vex her."]
    assert "Sixteen years had Miss Taylor been in Mr. Woodhouse's family, less as a governess " \
           "than a friend, very fond of both daughters, but particularly of Emma." in emma


def test_jsonl_is_one_document_per_line_with_its_text_lines_split(shared_data, tmp_path):
    reuters = shared_data / "reuters21578" / "test.jsonl"
    documents_ = read([str(reuters)], "jsonl")
    assert len(documents_) == 3019  # one per story
    # The first story: title line, then its body split into sentences.
    assert documents_[0][:3] == [
        "ASIAN EXPORTERS FEAR DAMAGE FROM U.S.-JAPAN RIFT",
        "Mounting trade friction between the U.S. And Japan has raised fears among many of Asia's "
        "exporting nations that the row could inflict far-reaching economic damage, businessmen "
        "and officials said.",
        "They told Reuter correspondents in Asian capitals a U.S. Move against Japan might boost "
        "protectionist sentiment in the U.S. And lead to curbs on American imports of their "
        "products."]
    # Blank lines skipped, other fields ignored, an empty text no document; a bad line is named.
    path = write(tmp_path / "d.jsonl", b'{"text": "One. Two", "id": 3}\n\n{"text": ""}\n'
                 b'{"text": "A\\nB"}\n')
    assert read([path], "jsonl") == [["One.", "Two"], ["A", "B"]]
    bad = write(tmp_path / "bad.jsonl", b'{"text": "fine"}\n["text"]\n')
    with pytest.raises(InputFormatError, match=r'bad.jsonl:2: not a JSON object with a "text"'):
        read([bad], "jsonl")


@pytest.mark.parametrize("paragraph, sentences", [
    ("Mr. Smith went to Washington. He said \"Hello.\" Then he left!",
     ["Mr. Smith went to Washington.", "He said \"Hello.\"", "Then he left!"]),
    ("The U.S. Army came. J. R. R. Tolkien wrote it. It is 3.5 m long. 4 people came.",
     ["The U.S. Army came.", "J. R. R. Tolkien wrote it.", "It is 3.5 m long.", "4 people came."]),
    ("It was made in 1990 . \" Quoted \" he said .", ["It was made in 1990 .",
                                                    "\" Quoted \" he said ."]),
    ("What? said he. \"Yes,\" she replied. (And so on.) Done...  Next",
     ["What? said he.", "\"Yes,\" she replied.", "(And so on.)", "Done...", "Next"]),
    ("no end here", ["no end here"]),
])
def test_sentence_splitting_rules(paragraph, sentences):
    assert documents.split_sentences(paragraph) == sentences


def test_globs_are_sorted_and_a_pattern_matching_nothing_is_an_error(tmp_path):
    for name in ("b.txt", "a.txt", "c.md"):
        write(tmp_path / name, b"x\n")
    files = documents.expand_input_files(f"{tmp_path}/*.txt,{tmp_path}/c.md")
    assert files == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), str(tmp_path / "c.md")]
    with pytest.raises(InputFormatError, match=r"--input_file: '.*/nothing\*' matches no file"):
        documents.expand_input_files(f"{tmp_path}/a.txt,{tmp_path}/nothing*")


def test_unknown_format_names_the_flag():
    with pytest.raises(ValueError, match="--input_format='html'"):
        InputOptions("html").check()


# ------------------------------------------------------------------ ranges of one file
def test_input_ranges_cut_only_between_documents(tmp_path, shared_data):
    """However small the ranges, reading them in turn gives the whole file's documents."""
    path = tmp_path / "lines.txt"
    wiki = str(shared_data / "corpus" / "wikitext-2" / "valid.txt")
    with open(path, "w", encoding="utf-8") as f:
        for document in documents.stream_documents([wiki], InputOptions("wikitext")):
            for start in range(0, len(document.sentences), 7):
                f.write("".join(f" {s}\r\n" for s in document.sentences[start:start + 7]))
                f.write("  \n\n" if start % 2 else "\n")
    options = InputOptions()
    whole = [d.sentences for d in documents.stream_documents([str(path)], options)]
    assert len(whole) > 1_000
    for range_bytes in (10**9, 200_000, 3_000, 1):
        ranges = documents.input_ranges([str(path)], options, range_bytes)
        assert ranges[0].start == 0 and ranges[-1].end == path.stat().st_size
        assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
        assert [d for part in ranges for d in documents.range_documents(part, options)] == whole
    assert len(documents.input_ranges([str(path)], options, 3_000)) > 300
    assert len(documents.input_ranges([str(path)], InputOptions("wikitext"), 3_000)) == 1


def test_an_error_in_a_later_range_names_the_line_of_the_file(tmp_path):
    path = tmp_path / "bad.txt"
    lines = [f"Sentence {i}.\n" + ("\n" if i % 3 == 0 else "") for i in range(3000)]
    lines[2500] = "Not \xff UTF-8.\n"
    path.write_bytes("".join(lines).encode("utf-8").replace("\xff".encode("utf-8"), b"\xff"))
    number = "".join(lines[:2500]).count("\n") + 1
    ranges = documents.input_ranges([str(path)], InputOptions(), 2_000)
    assert len(ranges) > 10
    with pytest.raises(InputFormatError, match=f"bad.txt:{number}: not UTF-8"):
        for part in ranges:
            list(documents.range_documents(part, InputOptions()))
