"""What the registry, the serving side and the CLI must compute alike: the sha256 of files, folders
and a version's manifest, and the signed in-toto statements over those digests. It imports no
other package of the project, so every side can depend on it."""
