"""Operations: the database pool and migrations, bootstrap, metrics and logs."""
