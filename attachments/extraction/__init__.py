"""Text extraction from documents (PDF, DOCX, XLSX, PPTX, HTML, CSV, Markdown, plain text and
source code), plugged into the attachments' processing registry (docs/ATTACHMENTS.md#extraction).

The reading itself runs in a child process (`python -m attachments.extraction.child`) with
an address-space limit and a wall-clock timeout, so a bomb or a hang fails one file, never
the worker. The modules the child imports (`child`, `pages`, `pdf`, `office`, `xlsx`,
`text`) use no Django; `runner` starts the child; `processor` (the registry's entry) and
`tools` (`attachment_read`) are the hub's side.

**The stored format.** `Attachment.extracted_text` is the document's pages joined by a form
feed (`\\f`, U+000C): page N (1-based) is `extracted_text.split("\\f")[N - 1]`; a form feed
in the source becomes a newline. A page is a PDF page, a PPTX slide, up to about
`PAGE_CHARS` characters of one XLSX sheet's rows (headed by the sheet's name and rows), and
for flowing text (DOCX, HTML, Markdown, CSV, plain text, source code) up to about
`PAGE_CHARS` characters cut at a line end.
"""
