"""Files and folders that someone else could have placed where toolcat reads, writes or
deletes: trusted folders, regular files of a bounded size, stamps, and entries this code
made (``checks``). Below every package that keeps files (store, search, runtime)."""
