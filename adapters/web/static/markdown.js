// GitHub-flavoured Markdown for the web chat, built as DOM nodes: answers are model output, so
// they are treated as hostile. Nothing here ever parses a string as HTML (no innerHTML): every
// piece of text becomes a text node, so `<script>`, `<img onerror=…>` and the like show as the
// characters they are. The only attributes set are an element's own: a link's href (http, https
// or mailto only, checked by the URL parser: no javascript:, data: or relative URLs), target and
// rel, a list's start, a cell's alignment, a task's checkbox state. Images are shown as links,
// never loaded (an answer cannot make the browser fetch anything by itself being shown).
//
// Blocks: paragraphs, headings, fenced code (with a copy button), lists (nested, ordered, task
// lists), tables, block quotes, rules. Inline: code, links and bare URLs, **strong**, *em*, ~~del~~.
"use strict";
(function (global) {
  const LINK_PROTOCOLS = ["http:", "https:", "mailto:"];
  const FENCE = /^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?/;
  const LIST = /^( *)([-*+]|\d{1,9}[.)])(?: +|$)/;
  const TABLE_DELIMITER = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/;
  const TASK = /^\[([ xX])\](?:\s+|$)/;

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }
  function indentOf(line) { return line.length - line.replace(/^ +/, "").length; }
  function blank(line) { return !line.trim(); }

  // The URL a link may point to, or null: absolute, and one of LINK_PROTOCOLS once the browser's
  // own parser has read it (so "java\tscript:", "JAVASCRIPT:" or entities cannot slip through).
  function safeUrl(raw) {
    let url;
    try { url = new URL(raw.trim()); } catch (e) { return null; }
    return LINK_PROTOCOLS.includes(url.protocol) ? url.href : null;
  }
  function link(href, label) {
    const a = el("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    label(a);
    return a;
  }

  // --- inline --------------------------------------------------------------------------------

  const CODE_SPAN = /^(`+)([^`][\s\S]*?)\1(?!`)/;
  const LINK_TAIL = /^\]\(\s*<?([^\s<>]*?)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/;
  const AUTOLINK = /^<((?:https?|mailto):[^\s<>]+)>/i;
  const BARE_URL = /^https?:\/\/[^\s<>]*[^\s<>.,:;"'!?)\]*_~]/i;
  const STRONG = [/^\*\*(?=\S)([\s\S]*?\S)\*\*/, /^__(?=\S)([\s\S]*?\S)__(?![A-Za-z0-9])/];
  const EM = [/^\*(?=[^\s*])([\s\S]*?[^\s*])\*(?!\*)/, /^_(?=[^\s_])([\s\S]*?[^\s_])_(?![A-Za-z0-9])/];
  const DEL = /^~~(?=\S)([\s\S]*?\S)~~/;

  // The closing bracket of a link's text, allowing nested brackets and escapes; -1 if none.
  function closingBracket(text, from) {
    let depth = 0;
    for (let i = from; i < text.length; i++) {
      const c = text[i];
      if (c === "\\") { i++; continue; }
      if (c === "`") { const m = CODE_SPAN.exec(text.slice(i)); if (m) { i += m[0].length - 1; continue; } }
      if (c === "[") depth++;
      else if (c === "]") { if (depth === 0) return i; depth--; }
    }
    return -1;
  }

  function inline(text, parent) {
    let buf = "";
    const flush = () => { if (buf) { parent.appendChild(document.createTextNode(buf)); buf = ""; } };
    const put = (node) => { flush(); parent.appendChild(node); };
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      const rest = text.slice(i);
      const before = i > 0 ? text[i - 1] : " ";
      let m;
      if (c === "\\" && /^[!-/:-@[-`{-~]$/.test(text[i + 1] || "")) { buf += text[i + 1]; i += 2; continue; }
      if (c === "\\" && text[i + 1] === "\n") { put(el("br")); i += 2; continue; }
      if (c === "\n") { put(el("br")); i++; continue; }
      if (c === "`" && (m = CODE_SPAN.exec(rest))) {
        const code = el("code");
        code.textContent = m[2].replace(/\n/g, " ");
        put(code);
        i += m[0].length;
        continue;
      }
      if ((c === "[" || (c === "!" && text[i + 1] === "[")) && /^!?\[/.test(rest)) {
        const open = i + (c === "!" ? 2 : 1);
        const close = closingBracket(text, open);
        if (close >= 0 && (m = LINK_TAIL.exec(text.slice(close)))) {
          const label = text.slice(open, close);
          const href = safeUrl(m[1]);
          if (href) put(link(href, (a) => inline(label || href, a)));
          else { flush(); inline(label, parent); } // not a link we follow: its text only
          i = close + m[0].length;
          continue;
        }
      }
      if (c === "<" && (m = AUTOLINK.exec(rest))) {
        const href = safeUrl(m[1]);
        if (href) { put(link(href, (a) => { a.textContent = m[1]; })); i += m[0].length; continue; }
      }
      if ((c === "h" || c === "H") && !/[A-Za-z0-9]/.test(before) && (m = BARE_URL.exec(rest))) {
        const href = safeUrl(m[0]);
        if (href) { put(link(href, (a) => { a.textContent = m[0]; })); i += m[0].length; continue; }
      }
      if (c === "*" || c === "_") {
        const wordy = c === "_" && /[A-Za-z0-9]/.test(before); // snake_case stays as it is
        const strong = wordy ? null : STRONG[c === "*" ? 0 : 1].exec(rest);
        const em = wordy || strong ? null : EM[c === "*" ? 0 : 1].exec(rest);
        if (strong || em) {
          const node = el(strong ? "strong" : "em");
          inline((strong || em)[1], node);
          put(node);
          i += (strong || em)[0].length;
          continue;
        }
      }
      if (c === "~" && (m = DEL.exec(rest))) {
        const node = el("del");
        inline(m[1], node);
        put(node);
        i += m[0].length;
        continue;
      }
      buf += c;
      i++;
    }
    flush();
  }

  // --- blocks --------------------------------------------------------------------------------

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || LIST.test(line);
  }

  function cells(row) {
    let s = row.trim();
    if (s.startsWith("|")) s = s.slice(1);
    if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
    return s.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
  }

  function table(lines, i, parent) {
    const head = cells(lines[i]);
    const align = cells(lines[i + 1]).map((d) => (d.startsWith(":") && d.endsWith(":") ? "center"
      : d.endsWith(":") ? "right" : d.startsWith(":") ? "left" : ""));
    const wrap = el("div", "table");
    const t = el("table");
    const row = (values, tag) => {
      const tr = el("tr");
      head.forEach((_, k) => {
        const cell = el(tag);
        if (align[k]) cell.style.textAlign = align[k];
        inline(values[k] || "", cell);
        tr.appendChild(cell);
      });
      return tr;
    };
    const thead = el("thead");
    thead.appendChild(row(head, "th"));
    t.appendChild(thead);
    const tbody = el("tbody");
    i += 2;
    while (i < lines.length && !blank(lines[i]) && lines[i].includes("|") && !startsBlock(lines[i])) {
      tbody.appendChild(row(cells(lines[i]), "td"));
      i++;
    }
    if (tbody.children.length) t.appendChild(tbody);
    wrap.appendChild(t);
    parent.appendChild(wrap);
    return i;
  }

  function code(body, language, parent) {
    const box = el("div", "code");
    const pre = el("pre");
    const c = el("code");
    if (language) c.dataset.language = language;
    c.textContent = body;
    pre.appendChild(c);
    const copy = el("button", "copy");
    copy.type = "button";
    copy.textContent = "Copy";
    copy.setAttribute("aria-label", "Copy the code");
    copy.onclick = async () => {
      try {
        await navigator.clipboard.writeText(body);
        copy.textContent = "Copied";
      } catch (e) { // no clipboard (not a secure context): select it, for Ctrl+C
        const range = document.createRange();
        range.selectNodeContents(c);
        const selection = getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        copy.textContent = "Selected";
      }
      setTimeout(() => { copy.textContent = "Copy"; }, 1500);
    };
    box.append(copy, pre);
    parent.appendChild(box);
  }

  function list(lines, i, parent) {
    const first = LIST.exec(lines[i]);
    const indent = first[1].length;
    const ordered = /\d/.test(first[2]);
    const node = el(ordered ? "ol" : "ul");
    const number = parseInt(first[2], 10);
    if (ordered && number !== 1) node.start = number;
    let loose = false;
    while (i < lines.length) {
      const m = LIST.exec(lines[i]);
      if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
      const inner = m[0].length;
      const body = [lines[i].slice(inner)];
      i++;
      while (i < lines.length) {
        const line = lines[i];
        if (blank(line)) {
          let k = i;
          while (k < lines.length && blank(lines[k])) k++;
          if (k < lines.length && indentOf(lines[k]) >= inner) { body.push(...lines.slice(i, k)); i = k; loose = true; continue; }
          break;
        }
        if (indentOf(line) >= inner) { body.push(line.slice(inner)); i++; continue; }
        if (indentOf(line) > indent && LIST.test(line)) { body.push(line.slice(indent + 1)); i++; continue; }
        if (startsBlock(line)) break;
        body.push(line.trim()); // a lazy continuation of the item's paragraph
        i++;
      }
      const li = el("li");
      const task = TASK.exec(body[0]);
      if (task) {
        const box = el("input");
        box.type = "checkbox";
        box.disabled = true;
        box.checked = task[1] !== " ";
        li.className = "task";
        li.appendChild(box);
        body[0] = body[0].slice(task[0].length);
      }
      blocks(body, li);
      node.appendChild(li);
      // Items a blank line apart: the same list, if the next one is of it.
      let k = i;
      while (k < lines.length && blank(lines[k])) k++;
      const next = k < lines.length ? LIST.exec(lines[k]) : null;
      if (k > i && next && next[1].length === indent && /\d/.test(next[2]) === ordered) { i = k; loose = true; }
    }
    if (!loose) { // a tight list: its items' paragraphs are just their text
      for (const p of node.querySelectorAll(":scope > li > p")) p.replaceWith(...p.childNodes);
    }
    parent.appendChild(node);
    return i;
  }

  function blocks(lines, parent) {
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (blank(line)) { i++; continue; }
      if ((m = FENCE.exec(line))) {
        const [, pad, fence, language] = m;
        const body = [];
        i++;
        while (i < lines.length && !(lines[i].trim().startsWith(fence[0].repeat(fence.length))
                                     && /^[`~]+$/.test(lines[i].trim()) && lines[i].trim()[0] === fence[0])) {
          body.push(lines[i].startsWith(pad) ? lines[i].slice(pad.length) : lines[i].trimStart());
          i++;
        }
        i++; // the closing fence (or the end: a fence still streaming)
        code(body.join("\n"), language, parent);
        continue;
      }
      if ((m = HEADING.exec(line))) {
        // An answer's headings sit below the page's own: # is h3, and nothing goes past h6.
        const h = el("h" + Math.min(m[1].length + 2, 6));
        inline(m[2] || "", h);
        parent.appendChild(h);
        i++;
        continue;
      }
      if (RULE.test(line)) { parent.appendChild(el("hr")); i++; continue; }
      if (QUOTE.test(line)) {
        const inner = [];
        while (i < lines.length && !blank(lines[i]) && (QUOTE.test(lines[i]) || !startsBlock(lines[i]))) {
          inner.push(lines[i].replace(QUOTE, ""));
          i++;
        }
        const q = el("blockquote");
        blocks(inner, q);
        parent.appendChild(q);
        continue;
      }
      if (LIST.test(line)) { i = list(lines, i, parent); continue; }
      if (line.includes("|") && i + 1 < lines.length && TABLE_DELIMITER.test(lines[i + 1])
          && lines[i + 1].includes("-")) {
        i = table(lines, i, parent);
        continue;
      }
      const para = [];
      while (i < lines.length && !blank(lines[i]) && !(para.length && startsBlock(lines[i]))
             && !(lines[i].includes("|") && i + 1 < lines.length && TABLE_DELIMITER.test(lines[i + 1]))) {
        para.push(lines[i].trim());
        i++;
      }
      if (!para.length) { para.push(line.trim()); i++; }
      const p = el("p");
      inline(para.join("\n"), p);
      parent.appendChild(p);
    }
  }

  function render(text) {
    const out = document.createDocumentFragment();
    blocks(String(text).replace(/\r\n?/g, "\n").replace(/\t/g, "    ").split("\n"), out);
    return out;
  }

  global.AgentMarkdown = { render, safeUrl };
})(window);
