"""The run report of `shardflow etl` (OUTPUT/report.html): `page.render` builds the page,
`svg` draws its charts, `graph` reads the pipeline graph of the job."""
