"""`fragbench import`: public datasets, in their published formats, as columnar corpus
folders (docs/corpus.md). Each importer parses its input in memory once, refusing what is not
that format in one line, validates the result as `fragbench.corpus.columnar` will load it, then
writes the folder atomically (`fragbench.corpus.importers.write`)."""
