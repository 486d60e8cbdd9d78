package mlx

// LastBLASThreads exposes lastBLASThreads to the package's external tests.
var LastBLASThreads = lastBLASThreads
