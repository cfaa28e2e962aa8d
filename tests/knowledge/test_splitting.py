"""Documents split along their structure, English and Chinese alike, sized in tokens."""

from chats.agent.tokens import count_tokens
from knowledge.splitting import search_form, split_document


def test_markdown_headings_make_the_section_path_and_code_fences_are_not_headings():
    text = (
        "# Runbook\n\nIntro.\n\n## Disk\n### Full disk\nRemove old logs.\n\n"
        "```\n# not a heading\nrm /var/log/old\n```\n\n## Certificates\nRenew them."
    )
    pieces = split_document(text)
    assert [p.section for p in pieces] == [
        "Runbook",
        "Runbook › Disk › Full disk",
        "Runbook › Certificates",
    ]
    assert "# not a heading" in pieces[1].text
    assert [p.ordinal for p in pieces] == [0, 1, 2]


def test_underlined_titles_are_headings_too():
    pieces = split_document("Installation\n============\n\nRun make.\n\nUsage\n-----\n\nRun it.")
    assert [(p.section, p.text) for p in pieces] == [
        ("Installation", "Run make."),
        ("Installation › Usage", "Run it."),
    ]


def test_pages_are_kept_and_a_heading_carries_across_a_page_break():
    pieces = split_document("# Intro\nfirst page\fsecond page text", paged=True)
    assert [(p.section, p.page, p.text) for p in pieces] == [
        ("Intro", 1, "first page"),
        ("Intro", 2, "second page text"),
    ]


def test_chinese_without_spaces_is_cut_at_sentence_ends_within_the_token_size():
    sentence = "磁盘已满时，删除旧日志并扩容。"
    text = "# 运维手册\n## 磁盘已满\n" + sentence * 200
    pieces = split_document(text, max_tokens=100)
    assert len(pieces) > 5
    for piece in pieces:
        assert piece.section == "运维手册 › 磁盘已满"
        assert count_tokens(piece.text) <= 100
        assert piece.text.endswith("。")
    assert "".join(p.text for p in pieces) == sentence * 200


def test_one_long_english_paragraph_is_cut_into_sentences_and_a_huge_word_at_tokens():
    text = "Rotate the logs daily. " * 300 + "x" * 5000
    pieces = split_document(text, max_tokens=120)
    assert all(p.token_count <= 120 for p in pieces)
    assert pieces[0].text.startswith("Rotate the logs daily.")
    assert sum("x" * 100 in p.text for p in pieces) >= 2


def test_the_index_form_of_chinese_is_character_bigrams():
    assert search_form("磁盘已满 disk 满").split() == ["磁盘", "盘已", "已满", "disk", "满"]


def test_asciidoc_titles_and_listing_blocks_with_shell_comments():
    text = (
        "git-stash(1)\n============\n\nNAME\n----\ngit-stash - Stash the changes\n\n"
        "EXAMPLES\n--------\nInterrupted workflow::\n+\n------------\n# ... hack hack ...\n"
        "$ git stash\n------------\n+\nThen pop it.\n\nSEE ALSO\n--------\ngit-pull(1)\n"
    )
    pieces = split_document(text)
    assert [p.section for p in pieces] == [
        "git-stash(1) › NAME",
        "git-stash(1) › EXAMPLES",
        "git-stash(1) › SEE ALSO",
    ]
    assert "# ... hack hack ..." in pieces[1].text and "Then pop it." in pieces[1].text


def test_a_markdown_rule_without_a_twin_is_no_listing():
    pieces = split_document("# A\ntext\n\n----\n\n# B\nmore")
    assert [p.section for p in pieces] == ["A", "B"]


def test_an_asciidoc_anchor_after_a_title_is_not_part_of_the_heading():
    text = "OPTIONS[[OPTIONS]]\n------------------\n\n--all::\n\tPush all branches.\n"
    text += "\nCONFIGURED BRANCHES [[CRTB]]\n----------------------------\n\nThe rest.\n"
    pieces = split_document(text)
    assert [p.section for p in pieces] == ["OPTIONS", "CONFIGURED BRANCHES"]
    # A heading that merely holds brackets keeps them.
    assert split_document("# Arrays [a] and [[b]] c\ntext")[0].section == "Arrays [a] and [[b]] c"
