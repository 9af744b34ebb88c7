"""microops."""
