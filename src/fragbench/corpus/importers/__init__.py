"""`fragbench import`: public datasets, in their published formats, as columnar corpus
folders (docs/corpus.md). Each importer reads its input once, as a stream (`reading`),
refusing what is not that format in one line, gives each case its language (`language`:
given or detected, counted), and writes the folder batch by batch, each batch validated as
`fragbench.corpus.columnar` will load it, atomically (`write`): memory does not grow with the
input."""
