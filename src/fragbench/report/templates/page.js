/* The pages' one script (report.html, the compare pages), allowed by its hash.

   One pager, one set of filters and search, one URL state for every page (`pagedList`): the
   filters and the search look at every item, not only the page shown; a page of the items
   that match is shown at a time; the state is the URL's fragment (#?case=…&q=…&page=2), so
   a reload, a link and the back and forward buttons give the same view; a link to an item
   (#call-ID, #cell-…) shows that item's page, clearing the filters if they hide it. Each
   select compares the field its data-field names, whole or as one of its words
   (data-match), and is named in the URL by its data-state.

   report.html (a form.filters with data-calls), the pair page (data-cells) and the grid page
   (data-rows): the page holds an index (a JSON element: what the filters compare, what a link
   names), and each call's, cell's or row's detail is in the data files beside the page
   (`dataFiles`: script elements this script adds, each handing over one file's JSON), loaded
   for the page of items shown; the search texts are loaded on the first search, with its
   progress said. While a page of items waits for its files, the list is aria-busy. Every
   value is put in with textContent or as an attribute's value, never parsed as HTML
   (`reportPage`, `cellPage` with `pairCell` or `gridRow`).

   Forms, pagers and controls are shown only here, when the script runs. The sticky header's
   height is kept as the scroll padding, so a link is not hidden under it. */
(function () {
  "use strict";
  var header = document.querySelector("header.top");
  function pad() {
    if (header) {
      document.documentElement.style.setProperty("--head", (header.offsetHeight + 8) + "px");
    }
  }
  window.addEventListener("resize", pad);

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  /* Text from the corpus or the model, in whatever script it is written: dir="auto" lets
     the browser lay an Arabic or Hebrew sentence out right to left, each element on its
     own (the page's own words stay left to right). */
  function outside(tag, cls, text) {
    var e = el(tag, cls, text);
    e.dir = "auto";
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function say(parent, text) { parent.appendChild(document.createTextNode(String(text))); }

  /* A citation as both pages draw it: c is [number, cited ID, extract, reason, reason at the
     typographic level, fact ID where a misattributed extract was found (or absent)]; `reasons`
     maps a reason to [words, help, symbol]. Text only, never markup. */
  function citing(reasons) {
    function word(reason) { return reasons[reason] ? reasons[reason][0] : reason; }

    function badge(reason) {
      var span = el("span", "reason r-" + reason);
      span.title = reasons[reason] ? reasons[reason][1] : reason;
      var sym = add(span, el("span", "sym", reasons[reason] ? reasons[reason][2] : ""));
      sym.setAttribute("aria-hidden", "true");
      say(span, " " + word(reason));
      return span;
    }

    function citation(c, anchor) {
      var li = el("li", "citation r-" + c[3]);
      li.id = anchor + "-c" + c[0];
      li.dataset.citation = String(c[0]);
      li.dataset.citedId = c[1];
      li.dataset.reason = c[3];
      li.dataset.reasonFolded = c[4];
      var head = add(li, el("div", "cite-head"));
      add(head, el("span", "num", c[0])).title = "citation number";
      say(head, " ");
      add(head, el("span", "cited-id", c[1])).title = "the ID the answer cites";
      say(head, " ");
      add(head, badge(c[3]));
      if (c[4] !== c[3]) {
        say(head, " ");
        add(head, el("span", "folded", "typographic level: " + word(c[4])));
      }
      if (c[5] && c[3] === "misattributed") {
        say(head, " ");
        add(head, el("span", "found", "found word for word under " + c[5]));
      }
      say(li, "\n");
      add(li, outside("q", "extract", c[2]));
      if (!c[2].trim()) {
        say(li, " ");
        add(li, el("span", "note", "(an empty extract)"));
      }
      return li;
    }

    return {word: word, badge: badge, citation: citation};
  }

  /* -- the data files beside a page (fragbench.report.pagedata) ---------------------------- */

  /* `files` is the index's {dir, calls, search}: the folder beside the page, and how many
     items each detail file and each search file holds. A file is a script calling
     fragbenchData(name, json); only scripts this function adds can run (the policy's
     'strict-dynamic'), and their URL is the folder (checked: NAME-data/ and its digest) and
     a name built here from a number: never a value of the data.
     Detail files are kept while they are among the last KEEP used; search files for good. */
  var KEEP = 64;
  var DIGEST = /^[^\/\\.][^\/\\]*-data\/[0-9a-f]{16}$/;

  function dataFiles(files, kind) {
    var dir = String(files.dir || "");
    var waiting = new Map();
    var held = new Map();
    window.fragbenchData = function (name, text) {
      var wait = waiting.get(name);
      if (!wait || wait.data !== undefined) { return; }
      try {
        wait.data = JSON.parse(String(text));
      } catch (error) {
        wait.data = null;
      }
    };

    function name(prefix, number) { return prefix + "-" + String(number).padStart(4, "0"); }
    function path(file) { return dir + "/" + file + ".js"; }

    function load(file, done) {
      if (held.has(file)) {
        var data = held.get(file);
        held.delete(file);
        held.set(file, data);  /* the newest last */
        done(null, data);
        return;
      }
      var wait = waiting.get(file);
      if (wait) { wait.done.push(done); return; }
      wait = {done: [done], data: undefined};
      waiting.set(file, wait);
      function end(error) {
        waiting.delete(file);
        if (!error && wait.data) {
          held.set(file, wait.data);
          var keep = Array.from(held.keys()).filter(function (k) { return k.indexOf("search-") !== 0; });
          while (keep.length > KEEP) { held.delete(keep.shift()); }
        }
        wait.done.forEach(function (fn) {
          if (error || !wait.data) { fn(error || path(file)); } else { fn(null, wait.data); }
        });
      }
      if (!DIGEST.test(dir)) { end(path(file)); return; }
      var script = document.createElement("script");
      script.src = dir.split("/").map(encodeURIComponent).join("/") + "/" + file + ".js";
      script.onload = function () { script.remove(); end(null); };
      script.onerror = function () { script.remove(); end(path(file)); };
      document.head.appendChild(script);
    }

    /* Every file of `numbers`, then done(error, [data of each]); synchronously when each is
       held already. */
    function all(prefix, numbers, done, progress) {
      var got = new Array(numbers.length);
      var left = numbers.length;
      var failed = null;
      if (!left) { done(null, got); return; }
      numbers.forEach(function (number, k) {
        load(name(prefix, number), function (error, data) {
          if (error) { failed = failed || error; } else { got[k] = data; }
          left -= 1;
          if (progress) { progress(numbers.length - left, numbers.length); }
          if (!left) { done(failed, got); }
        });
      });
    }

    return {
      /* The detail of items `indexes`: done(error, [item of each]). */
      items: function (indexes, done) {
        var numbers = [];
        indexes.forEach(function (i) {
          var n = Math.floor(i / files[kind]) + 1;
          if (numbers.indexOf(n) < 0) { numbers.push(n); }
        });
        all(kind, numbers, function (error, got) {
          if (error) { done(error); return; }
          done(null, indexes.map(function (i) {
            var file = got[numbers.indexOf(Math.floor(i / files[kind]) + 1)];
            return {item: file[kind][i % files[kind]], file: file};
          }));
        });
      },
      /* Every search text, in order: done(error, texts); progress(files loaded, files). */
      search: function (count, done, progress) {
        var numbers = [];
        for (var n = 1; (n - 1) * files.search < count; n += 1) { numbers.push(n); }
        all("search", numbers, function (error, got) {
          done(error, error ? null : [].concat.apply([], got));
        }, progress);
      },
      dir: dir
    };
  }

  /* An index column as the page holds it: [distinct values, each item's position there]. */
  function coded(fields, name) {
    return Object.prototype.hasOwnProperty.call(fields, name) ? fields[name] : null;
  }

  /* -- report.html ------------------------------------------------------------------------ */

  /* Unreadable data (never expected: the page writes it escaped): said, rather than part drawn. */
  function unreadable(list, what) {
    list.dataset.error = "unreadable";
    list.appendChild(el("p", "error", what));
  }

  function reportPage(form) {
    var island = document.getElementById(form.dataset.calls);
    var list = document.getElementById("call-list");
    var data = null;
    try {
      data = JSON.parse(island.textContent);
    } catch (error) {
      unreadable(list, "The calls' data in this page cannot be read; calls.parquet in the " +
        "series folder holds every call.");
      return;
    }
    var count = data.count;
    var fields = data.fields;
    var reasons = data.reasons;
    var files = dataFiles(data.files, "calls");
    /* A Map, not an object: a call ID such as `constructor` or `__proto__` must be neither
       found where no call has it nor lost where one does. Built on the first link. */
    var byId = null;

    var cited = citing(reasons);
    var word = cited.word;
    var citation = cited.citation;

    function value(i, name) {
      var f = coded(fields, name);
      return f ? f[0][f[1][i]] : "";
    }
    /* A call's ID: as the plan names it (CASE-LANG-VARIANT-MODE-rREP) unless the index
       names it otherwise. */
    function callId(i) {
      if (Object.prototype.hasOwnProperty.call(data.ids, String(i))) { return data.ids[String(i)]; }
      return value(i, "case") + "-" + value(i, "lang") + "-" + value(i, "variant") + "-" +
        value(i, "mode") + "-r" + value(i, "rep");
    }

    /* A highlighted fragment's pieces as [text, citation numbers]: a piece stored by its
       length (UTF-16 code units) is read from the fragment's text, in order; one stored as
       text (the redactor changed the fragment) is that text. */
    function pieces(f, texts) {
      var whole = texts[f[1]];
      var at = 0;
      return f[2].map(function (piece) {
        if (typeof piece[0] !== "number") { return piece; }
        at += piece[0];
        return [whole.slice(at - piece[0], at), piece[1]];
      });
    }

    function fragments(call, texts, highlight) {
      var ol = el("ol", "fragments");
      var reasonOf = {};
      call.cites.forEach(function (c) { reasonOf[c[0]] = c[3]; });
      call.frags.forEach(function (f) {
        var li = add(ol, outside("li", "fragment"));
        li.dataset.factId = f[0];
        if (!highlight || f.length < 3) {
          li.textContent = texts[f[1]];
          return;
        }
        pieces(f, texts).forEach(function (piece) {
          var text = piece[0];
          if (!piece[1].length) { say(li, text); return; }
          var named = piece[1].map(function (n) { return reasonOf[n]; });
          var mark = add(li, el("mark", "cite r-" + named[0], text));
          mark.dataset.citations = piece[1].join(" ");
          mark.dataset.reasons = named.join(" ");
          mark.title = piece[1].map(function (n, k) {
            return "citation " + n + ": " + word(named[k]);
          }).join("; ");
        });
      });
      return ol;
    }

    function answered(call) {
      var box = el("div", "answered");
      if (call.error || call.failure) {
        var said = "";
        if (call.failure) {
          said = call.failure + (call.http_status ? " (HTTP " + call.http_status + ")" : "") + ": ";
        }
        add(box, el("p", "error", said + (call.error || "no error message")));
      }
      if (call.status === "interrupted") {
        add(box, el("p", "error", "Sent, outcome never recorded: the collector was " +
          "interrupted; the call counts at its reservation."));
      }
      if (call.refusal) { add(box, el("p", "refusal", "Refused: " + call.refusal)); }
      if (call.incomplete_reason) {
        add(box, el("p", "incomplete", "Incomplete: " + call.incomplete_reason));
      }
      add(box, el("h4", null, "Answer"));
      if (call.parsed) {
        add(box, outside("p", "answer", call.answer || ""));
        add(box, el("h4", null, "Citations"));
        var ol = add(box, el("ol", "citations"));
        call.cites.forEach(function (c) { add(ol, citation(c, "call-" + call.id)); });
        if (!call.cites.length) { add(box, el("p", "note", "The answer cites nothing.")); }
      } else if (call.text) {
        add(box, el("p", "unparsed", "No parsed answer: " + (call.parse_error || "") +
          ". The answer text as it came:"));
        add(box, outside("pre", "answer", call.text));
      } else if (call.status === "failed") {
        add(box, el("p", "unparsed", "No answer: the call failed (above)."));
      } else {
        add(box, el("p", "unparsed", "No parsed answer: " + (call.parse_error || "no answer text") +
          "."));
      }
      return box;
    }

    /* A located extract is null in the data: the text its fragment's pieces mark (each
       passage is stored once). Filled in once, before the call is first drawn. */
    function extracts(call, texts) {
      if (!call.cites.some(function (c) { return c[2] === null; })) { return; }
      var marked = {};
      call.frags.forEach(function (f) {
        if (f.length < 3) { return; }
        pieces(f, texts).forEach(function (piece) {
          piece[1].forEach(function (n) { marked[n] = (marked[n] || "") + piece[0]; });
        });
      });
      call.cites.forEach(function (c) { if (c[2] === null) { c[2] = marked[c[0]] || ""; } });
    }

    function article(call, texts) {
      extracts(call, texts);
      var a = el("article", "call");
      a.id = "call-" + call.id;
      var d = a.dataset;
      d.callId = call.id; d.case = call.case; d.lang = call.lang; d.variant = call.variant;
      d.mode = call.mode; d.rep = String(call.rep); d.status = call.status;
      d.reasons = call.cites.map(function (c) { return c[3]; }).join(" ");
      if (call.groups) {
        Object.keys(call.groups).forEach(function (k) { a.setAttribute("data-group-" + k, call.groups[k]); });
      }
      var head = add(a, el("div", "call-head"));
      var h3 = add(head, el("h3"));
      add(h3, el("span", "seq", call.seq + "."));
      say(h3, " " + call.id);
      add(head, el("span", "status s-" + call.status, call.words));
      var cell = call.case + " · " + call.lang + " · variant " + call.variant + " · " + call.mode +
        " · repetition " + call.rep;
      if (call.groups) {
        Object.keys(call.groups).forEach(function (k) { cell += " · " + k + " " + call.groups[k]; });
      }
      add(head, el("span", "cell", cell));
      if (call.q !== undefined) {  /* an index into texts: a question is stored once */
        var asked = add(a, el("p", "question"));
        add(asked, el("span", "label", "Question: "));
        add(asked, outside("span", "question-text", texts[call.q]));
      }
      if (call.cites.length) {
        var counts = add(head, el("span", "counts"));
        Object.keys(reasons).forEach(function (r) {
          var n = call.cites.filter(function (c) { return c[3] === r; }).length;
          if (n) {
            if (counts.childNodes.length) { say(counts, " "); }
            add(counts, el("span", "reason r-" + r, n + " " + word(r)));
          }
        });
      }
      if (call.stop_reason) {
        add(a, el("p", "stop", "The series stopped at this call: " + call.stop_reason +
          (call.stop_detail ? ": " + call.stop_detail : "")));
      }
      if (call.status === "not_sent") {
        add(a, el("p", "never-sent", "Planned, never sent: the model was given nothing and " +
          "answered nothing."));
        var unsent = add(a, el("details", "unsent-fragments"));
        add(unsent, el("summary", null, "What it would have been shown"));
        add(unsent, fragments(call, texts, false));
        return a;
      }
      var body = add(a, el("div", "call-body"));
      var shownBox = add(body, el("div", "shown"));
      add(shownBox, el("h4", null, "Fragments shown"));
      add(shownBox, fragments(call, texts, true));
      add(body, answered(call));
      var usage = add(a, el("dl", "usage"));
      data.usage.forEach(function (u, k) {
        var div = add(usage, el("div"));
        add(div, el("dt", null, u[1]));
        add(div, el("dd", null, call.usage[k])).dataset.field = u[0];
      });
      if (call.redacted) {
        add(a, el("p", "note", "A secret was redacted from this call's recorded outcome: its " +
          "text may differ from what came back."));
      }
      if (call.raw_response !== undefined) {
        var raw = add(a, el("details", "raw"));
        add(raw, el("summary", null, "Raw response"));
        add(raw, outside("pre", null, call.raw_response));
      }
      return a;
    }

    /* The search: the call's ID, then its search text (answer, unparsed text, extracts). */
    pagedList(form, list, filedSource(count, "calls", files, fields, value, function (text, i) {
      return callId(i) + "\n" + text;
    }, {
      draw: function (indexes, got) {
        list.replaceChildren.apply(list, got.map(function (one) {
          return article(one.item, one.file.texts);
        }));
      },
      /* #call-ID (or a citation's #call-ID-cN): that call's index, else -1. */
      locate: function (id) {
        if (id.indexOf("call-") !== 0) { return -1; }
        if (byId === null) {
          byId = new Map();
          for (var i = 0; i < count; i += 1) { byId.set(callId(i), i); }
        }
        var wanted = id.slice(5);
        if (!byId.has(wanted)) { wanted = wanted.replace(/-c[0-9]+$/, ""); }
        return byId.has(wanted) ? byId.get(wanted) : -1;
      },
      element: function (id, index) {
        return document.getElementById(id) || document.getElementById("call-" + callId(index));
      }
    }));
    var note = document.getElementById("calls-need-js");
    if (note) { note.hidden = true; }
  }

  /* What pagedList pages when the items are data files (dataFiles): the count, the index's
     coded fields, the items loaded as a page needs them, and the search texts loaded on the
     first search, each as searchText(text, i) gives it; `own` adds draw, locate and element. */
  function filedSource(count, noun, files, fields, value, searchText, own) {
    var haystacks = null;
    var source = {
      count: count,
      noun: noun,
      files: files,
      coded: function (name) { return coded(fields, name); },
      field: value,
      searchable: function () { return haystacks !== null; },
      loadSearch: function (done, progress) {
        files.search(count, function (error, texts) {
          if (!error) {
            haystacks = texts.map(function (text, i) {
              return searchText(text, i).toLowerCase();
            });
          }
          done(error);
        }, progress);
      },
      haystack: function (i) { return haystacks[i]; },
      need: function (indexes, done) { files.items(indexes, done); }
    };
    Object.keys(own).forEach(function (key) { source[key] = own[key]; });
    return source;
  }

  /* -- the one pager, filters, search and URL state of every page ---------------------------- */

  /* `source` is what is paged: count; field(i, name) (a select's data-field) or, faster,
     coded(name) ([distinct values, each item's position there], or null); haystack(i)
     (lower-case text the search looks in), behind searchable() and loadSearch(done,
     progress) when the search texts are files to load; need(indexes, done) (what drawing
     those items needs: done(error, what) at once or once loaded) and draw(indexes, what)
     (show exactly those items, in order); locate(id) (the index of the item a fragment #id
     names, or -1) and element(id, index) (what to scroll to). Everything else is here,
     once. */
  function pagedList(form, list, source) {
    var pagers = Array.prototype.slice.call(document.querySelectorAll("nav.pager"));
    var selects = Array.prototype.slice.call(form.querySelectorAll("select"));
    var search = form.querySelector("input[type=search]");
    var perSelect = document.getElementById("page-size");
    var shown = form.querySelector("output.shown");
    var defaultPer = Number(list.dataset.pageSize) || 50;
    var state = {page: 1, per: defaultPer};
    var drawn = 0;
    var generation = 0;
    var status = el("p", "list-status");
    status.setAttribute("role", "status");
    status.hidden = true;
    list.parentNode.insertBefore(status, list);

    function saying(text) {
      status.textContent = text || "";
      status.hidden = !text;
    }
    function busy(on) {
      if (on) { list.setAttribute("aria-busy", "true"); } else { list.removeAttribute("aria-busy"); }
    }
    /* A data file that cannot be read (the page opened without its folder): said once. */
    function failed(file) {
      busy(false);
      list.dataset.error = "missing";
      list.replaceChildren();
      saying("The data file " + file + " beside this page cannot be read: a page opens with " +
        "its folder " + (source.files ? source.files.dir : "") + "/ beside it (copy both " +
        "together). The series folder's tables hold every " + (source.noun || "item") + ".");
      status.className = "list-status error";
    }

    /* Whether one select keeps item i: a test, built once per select from the distinct
       values when the source has them coded. */
    function keeper(select) {
      var want = select.value;
      var word = select.dataset.match === "word";
      function fits(have) {
        return word ? have.split(/\s+/).indexOf(want) >= 0 : have === want;
      }
      var column = source.coded ? source.coded(select.dataset.field) : null;
      if (column) {
        var keep = column[0].map(fits);
        var codes = column[1];
        return function (i) { return keep[codes[i]]; };
      }
      return function (i) { return fits(source.field(i, select.dataset.field)); };
    }

    /* Every item that passes every select and holds the search's words (case ignored):
       indexes, in order. */
    function matching() {
      var tests = selects.filter(function (s) { return s.value; }).map(keeper);
      var q = search.value.trim().toLowerCase();
      var found = [];
      for (var i = 0; i < source.count; i += 1) {
        var keep = true;
        for (var t = 0; keep && t < tests.length; t += 1) { keep = tests[t](i); }
        if (keep && q && source.haystack(i).indexOf(q) < 0) { keep = false; }
        if (keep) { found.push(i); }
      }
      return found;
    }

    /* then() once the search texts are there (at once when there is no search, or they are
       loaded already); their loading said as it goes. */
    function searchable(then) {
      if (!search.value.trim() || !source.searchable || source.searchable()) { then(); return; }
      var mine = generation;
      busy(true);
      saying("Loading the search texts…");
      source.loadSearch(function (error) {
        if (error) { failed(error); return; }
        saying("");
        if (mine === generation) { then(); }
      }, function (done, files) {
        if (mine === generation && done < files) {
          saying("Loading the search texts: " + done + " of " + files + " files…");
        }
      });
    }

    /* Draw the page of items the state names; after(found) once it is on screen. */
    function draw(after) {
      generation += 1;
      var mine = generation;
      searchable(function () {
        if (mine !== generation) { return; }
        var found = matching();
        var pages = Math.max(1, Math.ceil(found.length / state.per));
        state.page = Math.min(Math.max(1, state.page), pages);
        var start = (state.page - 1) * state.per;
        var indexes = found.slice(start, start + state.per);
        if (shown) { shown.value = String(found.length); }
        pagers.forEach(function (pager) {
          pager.querySelector("output.page").value = String(state.page);
          pager.querySelector("output.pages").value = String(pages);
          pager.querySelector("button.prev").disabled = state.page <= 1;
          pager.querySelector("button.next").disabled = state.page >= pages;
        });
        var waited = false;
        var came = false;
        source.need(indexes, function (error, what) {
          came = true;
          if (mine !== generation) { return; }
          if (error) { failed(error); return; }
          try {
            source.draw(indexes, what);
          } catch (broken) {  /* a data file that is not what its index says: said, not hung */
            failed((source.files ? source.files.dir + "/" : "") + " (" + broken + ")");
            return;
          }
          busy(false);
          if (waited) { saying(""); }
          drawn += 1;
          list.dataset.drawn = String(drawn);
          if (drawn === 1) {  /* when the first page was drawn (benchmarks read it) */
            list.dataset.drawnAt = String(Math.round(performance.now()));
          }
          if (after) { after(found); }
        });
        if (!came) {
          waited = true;
          busy(true);
          saying("Loading " + (source.noun || "items") + " " + (start + 1) + " to " +
            (start + indexes.length) + " of " + found.length + "…");
        }
      });
    }

    /* The state in the URL: every select and the search by their data-state name, the page
       and the page size when not the first and the default. */
    function toUrl(push) {
      var params = new URLSearchParams();
      selects.forEach(function (s) { if (s.value) { params.set(s.dataset.state, s.value); } });
      if (search.value) { params.set("q", search.value); }
      if (state.page > 1) { params.set("page", String(state.page)); }
      if (state.per !== defaultPer) { params.set("per", String(state.per)); }
      var text = params.toString();
      var url = text ? "#?" + text : window.location.pathname + window.location.search;
      if (("#?" + text) === window.location.hash || (!text && !window.location.hash)) { return; }
      if (push) {
        window.history.pushState(null, "", url);
      } else {
        window.history.replaceState(null, "", url);
      }
    }

    function fromUrl() {
      var hash = window.location.hash;
      var params = new URLSearchParams(hash.indexOf("#?") === 0 ? hash.slice(2) : "");
      selects.forEach(function (s) {
        var want = params.get(s.dataset.state) || "";
        var known = Array.prototype.some.call(s.options, function (o) { return o.value === want; });
        s.value = known ? want : "";
      });
      search.value = params.get("q") || "";
      var per = Number(params.get("per"));
      state.per = PAGE_SIZES.indexOf(per) >= 0 ? per : defaultPer;
      perSelect.value = String(state.per);
      state.page = Math.max(1, Math.floor(Number(params.get("page"))) || 1);
    }

    var PAGE_SIZES = Array.prototype.map.call(perSelect.options, function (o) {
      return Number(o.value);
    });

    /* A fragment naming an item (#call-ID, #cell-…): that item's page, the filters cleared
       if they hide it. Returns false for any other fragment. */
    function toItem(hash) {
      var id = hash.slice(1);
      try { id = decodeURIComponent(id); } catch (error) { /* malformed: use it as it is */ }
      var index = source.locate(id);
      if (index < 0) { return false; }
      generation += 1;
      var mine = generation;
      searchable(function () {
        if (mine !== generation) { return; }
        var found = matching();
        var at = found.indexOf(index);
        if (at < 0) {
          selects.forEach(function (s) { s.value = ""; });
          search.value = "";
          found = matching();
          at = found.indexOf(index);
        }
        state.page = Math.floor(at / state.per) + 1;
        draw(function () {
          var target = source.element(id, index);
          if (target) { target.scrollIntoView(); }
        });
      });
      return true;
    }

    function route() {
      var hash = window.location.hash;
      if (hash.length > 1 && hash.indexOf("#?") !== 0) {
        if (toItem(hash)) { return; }
        if (!drawn) { fromUrl(); draw(); }
        return;
      }
      fromUrl();
      draw();
    }

    function changed(push) {
      state.page = 1;
      draw();
      toUrl(push);
    }
    form.addEventListener("change", function (event) {
      changed(event.target !== search);
    });
    var typing = null;
    search.addEventListener("input", function () {
      if (typing !== null) { window.clearTimeout(typing); }
      typing = window.setTimeout(function () { typing = null; changed(false); }, 150);
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      changed(true);
    });
    form.addEventListener("reset", function () {
      window.setTimeout(function () { changed(true); }, 0);
    });
    perSelect.addEventListener("change", function () {
      state.per = Number(perSelect.value) || defaultPer;
      changed(true);
    });
    pagers.forEach(function (pager) {
      pager.querySelector("button.prev").addEventListener("click", function () {
        state.page -= 1;
        draw();
        toUrl(true);
        list.scrollIntoView();
      });
      pager.querySelector("button.next").addEventListener("click", function () {
        state.page += 1;
        draw();
        toUrl(true);
        list.scrollIntoView();
      });
      pager.hidden = false;
    });
    window.addEventListener("popstate", route);
    window.addEventListener("hashchange", route);
    form.hidden = false;
    route();
  }


  /* -- the pair page (compare A B --html) -------------------------------------------------- */

  /* The pair page's cells are data (a JSON element, compare_html.cell_data), drawn a page at
     a time like report.html's calls, every value put in with textContent or as an attribute's
     value. A select's data-field names the cell's attribute (data-case: the cell's `case`). */
  /* The compare pages' cells (the pair page) and rows (the grid): an index in the page (a
     JSON element, compare_html.cell_index), each item in the data files beside it, drawn by
     `make(data)`'s function of one item. The anchor of item i: CASE-LANG-VARIANT-MODE-REP
     unless the index names it otherwise. */
  function cellPage(form, islandId, make) {
    var island = document.getElementById(islandId);
    var list = document.getElementById(form.dataset.list);
    var data = null;
    try {
      data = JSON.parse(island.textContent);
    } catch (error) {
      unreadable(list, "The cells' data in this page cannot be read; fragbench compare " +
        "--out FILE writes every cell.");
      return;
    }
    var count = data.count;
    var fields = data.fields;
    var files = dataFiles(data.files, "cells");
    var drawOne = make(data);
    var byAnchor = null;

    function value(i, name) {
      var f = coded(fields, name);
      return f ? f[0][f[1][i]] : "";
    }
    function anchorOf(i) {
      if (Object.prototype.hasOwnProperty.call(data.anchors, String(i))) {
        return data.anchors[String(i)];
      }
      return ["data-case", "data-lang", "data-variant", "data-mode", "data-rep"].map(function (n) {
        return value(i, n);
      }).join("-");
    }

    pagedList(form, list, filedSource(count, "cells", files, fields, value, function (text) {
      return text;
    }, {
      draw: function (indexes, got) {
        list.replaceChildren.apply(list, got.map(function (one) { return drawOne(one.item); }));
      },
      /* #cell-… (or a citation's #cell-…-a-cN): that cell's index, else -1. */
      locate: function (id) {
        if (byAnchor === null) {
          byAnchor = new Map();
          for (var i = 0; i < count; i += 1) { byAnchor.set("cell-" + anchorOf(i), i); }
        }
        var at = id;
        if (!byAnchor.has(at)) { at = at.replace(/-[ab]-c[0-9]+$/, ""); }
        return byAnchor.has(at) ? byAnchor.get(at) : -1;
      },
      element: function (id, index) {
        return document.getElementById(id) || document.getElementById("cell-" + anchorOf(index));
      }
    }));
    var note = document.getElementById("cells-need-js");
    if (note) { note.hidden = true; }
  }

  /* The pair page: an article per cell, side A beside side B. */
  function pairCell(data) {
    var names = data.series;
    var citation = citing(data.reasons).citation;
    var COUNTS = [["parsed", "parsed"], ["citations", null], ["valid", "valid citations"],
      ["not valid", "invalid citations"], ["conditions cited validly", "conditions cited validly"],
      ["cost (USD)", null]];

    function side(cell, s, k) {
      var letter = s.letter.toLowerCase();
      var div = el("div", "side side-" + letter);
      div.dataset.status = s.status || "";
      var head = add(div, el("div", "side-head"));
      add(head, el("h4", null, s.letter + ": " + names[k]));
      say(head, " ");
      add(head, el("span", "status s-" + (s.status || "absent"), s.status_words || "absent"));
      if (s.call_id) { say(head, " "); add(head, el("span", "call-id", s.call_id)); }
      if (!s.present) {
        add(div, el("p", "never-sent", "This cell is not in " + s.letter + "'s plan."));
        return div;
      }
      if (!s.sent) {
        add(div, el("p", "never-sent", "Planned, never sent: nothing was asked, nothing answered."));
        return div;
      }
      var dl = add(div, el("dl", "counts"));
      COUNTS.forEach(function (row, i) {
        add(dl, el("dt", null, row[0]));
        var dd = add(dl, el("dd", null, s.counts[i]));
        if (row[1] && cell.differing.indexOf(row[1]) >= 0) { dd.className = "diff"; }
      });
      if (s.error || s.failure) {
        var said = s.failure ? s.failure + (s.http_status ? " (HTTP " + s.http_status + ")" : "") +
          ": " : "";
        add(div, el("p", "error", said + (s.error || "no error message")));
      }
      if (s.refusal) { add(div, el("p", "refusal", "Refused: " + s.refusal)); }
      if (s.incomplete_reason) {
        add(div, el("p", "incomplete", "Incomplete: " + s.incomplete_reason));
      }
      if (s.answer !== undefined) {
        add(div, outside("p", "answer", s.answer));
      } else if (s.text) {
        add(div, el("p", "unparsed", "No parsed answer" + (s.parse_error ? ": " + s.parse_error : "") +
          ". The answer text as it came:"));
        add(div, outside("pre", "answer", s.text));
      }
      var ol = add(div, el("ol", "citations"));
      s.cites.forEach(function (c) { add(ol, citation(c, "cell-" + cell.anchor + "-" + letter)); });
      if (s.parsed && !s.cites.length) {
        add(div, el("p", "no-citations", "The answer cites nothing."));
      }
      return div;
    }

    function article(cell) {
      var a = cellNode("article", "cell", cell);
      var head = add(a, el("div", "cell-head"));
      add(head, el("h3", null, cell.case + " · " + cell.lang + " · variant " + cell.variant +
        " · " + cell.mode + " · repetition " + cell.rep));
      say(head, " ");
      if (cell.compared !== "true") {
        add(head, el("span", "verdict not-compared", "not compared"));
      } else if (cell.differs === "true") {
        add(head, el("span", "verdict differs", "differs"));
        say(head, " ");
        add(head, el("span", "differing", "in " + cell.differing.join(", ")));
      } else {
        add(head, el("span", "verdict same", "the same"));
      }
      if (cell.compared !== "true") { add(a, el("p", "note", cell.note || "")); }
      var sides = add(a, el("div", "sides"));
      cell.sides.forEach(function (s, k) { add(sides, side(cell, s, k)); });
      return a;
    }

    return article;
  }

  /* A compared cell's element (the pair page's article, the grid's row): its URL anchor and
     the data-* fields the filters read. */
  function cellNode(tag, cls, cell) {
    var node = el(tag, cls);
    node.id = "cell-" + cell.anchor;
    var d = node.dataset;
    d.case = cell.case; d.lang = cell.lang; d.variant = cell.variant; d.mode = cell.mode;
    d.rep = String(cell.rep); d.compared = cell.compared; d.differs = cell.differs;
    return node;
  }

  /* -- the grid page (compare S1 S2 S3 … --html) ------------------------------------------- */

  /* A row per cell (tr.cell-row), a column per series (td.side, outlined where it differs
     from S1's), drawn from the data as the pair page's cells are. */
  function gridRow(data) {
    var letters = data.series;
    return function (r) {
      var tr = cellNode("tr", "cell-row", r);
      var th = add(tr, el("th", null, r.case + " · " + r.lang + " · " + r.variant + " · " +
        r.mode + " · r" + r.rep));
      th.scope = "row";
      add(tr, el("td", "verdict", r.compared !== "true" ? "not compared" :
        (r.differs === "true" ? "differs" : "the same")));
      r.sides.forEach(function (side, k) {
        var td = add(tr, el("td", "side" + (side.differing.length ? " diff" : "")));
        td.dataset.series = letters[k];
        td.dataset.status = side.status;
        td.dataset.differing = side.differing.join(" ");
        if (side.differing.length) {
          td.title = "differs from S1 in " + side.differing_words.join(", ");
        }
        add(td, el("span", "status s-" + (side.status || "absent"), side.words));
        if (side.status && side.status !== "not_sent") {
          add(td, el("span", "counts", "parsed " + side.parsed + " · valid " + side.valid +
            " · not valid " + side.invalid + " · conditions " + side.conditions));
        }
      });
      return tr;
    };
  }

  var form = document.querySelector("form.filters");
  if (form && form.dataset.calls) {
    reportPage(form);
  } else if (form && form.dataset.cells) {
    cellPage(form, form.dataset.cells, pairCell);
  } else if (form && form.dataset.rows) {
    cellPage(form, form.dataset.rows, gridRow);
  }
  pad();
}());
