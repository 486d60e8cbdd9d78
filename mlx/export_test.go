package mlx

// Exposed to the package's external tests.
var (
	LastBLASThreads  = lastBLASThreads
	SmallRowProducts = smallRowProducts
)
