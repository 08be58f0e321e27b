"""How a shared file is handed to the model, and what a paused run keeps of it (no bytes)."""

from __future__ import annotations

from pydantic_ai.messages import BinaryContent, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

from gateway.inbound.attachments import FILE_TAG, kind, without_contents


def test_each_file_is_sorted_by_what_the_model_can_take() -> None:
    assert kind("chart.png", "image/png") == "image"
    assert kind("report.pdf", "application/pdf") == "pdf"
    assert kind("q3.csv", "text/csv") == "text"
    assert kind("notes.md", "application/octet-stream") == "text"  # named like text: read as text
    assert kind("main.py", "text/x-python; charset=utf-8") == "text"
    assert kind("data.json", "application/json") == "text"
    assert kind("archive.zip", "application/zip") == "other"
    assert kind("voice.ogg", "audio/ogg") == "other"


def test_a_paused_run_keeps_the_names_of_its_files_never_their_contents() -> None:
    secret_csv = "name,salary\nada,100\n"
    request = ModelRequest(parts=[UserPromptPart(content=[
        "Ada: what is this?",
        BinaryContent(data=b"\x89PNG-secret-bytes", media_type="image/png", identifier="chart.png"),
        f'{FILE_TAG}name="pay.csv" type="text/csv">\n{secret_csv}\n</file>',
    ])])
    plain = ModelRequest(parts=[UserPromptPart(content="an earlier turn")])
    stored = ModelMessagesTypeAdapter.dump_json(without_contents([plain, request])).decode()
    assert "secret" not in stored and "salary" not in stored and "iVBOR" not in stored  # no bytes, no base64
    kept = ModelMessagesTypeAdapter.validate_json(stored)
    assert kept[0] == plain
    content = kept[1].parts[0].content  # type: ignore[union-attr]
    assert content == ["Ada: what is this?", "[chart.png: its contents are not kept once the run is paused]",
                       '<file name="pay.csv" type="text/csv">[its contents are not kept once the run is paused]</file>']
